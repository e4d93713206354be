#include "allocator/block_pool.h"

#include <cstdlib>

#include "spdlog/spdlog.h"

namespace gpumux {

void BlockPool::Die(const char* what, const Block* block) {
  spdlog::critical("allocator: block {:#x} of {} bytes {}", block->address, block->size, what);
  std::abort();
}

std::vector<Block*> BlockPool::Blocks() const {
  std::vector<Block*> out;
  out.reserve(blocks_.size());
  for (const Entry& e : blocks_) out.push_back(e.block);
  return out;
}

}  // namespace gpumux
