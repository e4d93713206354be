#include "allocator/block_arena.h"

namespace gpumux {

void BlockArena::Grow() {
  chunks_.push_back(std::make_unique<Block[]>(kChunkBlocks));
  Block* chunk = chunks_.back().get();
  free_.reserve(chunks_.size() * kChunkBlocks);
  for (size_t i = kChunkBlocks; i > 0; --i) free_.push_back(&chunk[i - 1]);
}

}  // namespace gpumux
