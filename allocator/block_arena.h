#pragma once

// BlockArena: recycles Block objects so that splitting and merging on the
// allocator's hot path never reaches malloc. Blocks are carved from chunks
// that live as long as the arena. Not thread-safe.

#include <cstddef>
#include <memory>
#include <vector>

#include "allocator/block.h"

namespace gpumux {

class BlockArena {
 public:
  BlockArena() = default;
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  // A value-initialized Block, valid until Delete or the arena's destruction.
  Block* New() {
    if (free_.empty()) Grow();
    Block* block = free_.back();
    free_.pop_back();
    *block = Block{};
    return block;
  }
  // Precondition: `block` came from New() of this arena.
  void Delete(Block* block) { free_.push_back(block); }

 private:
  static constexpr size_t kChunkBlocks = 1024;
  void Grow();

  std::vector<std::unique_ptr<Block[]>> chunks_;
  std::vector<Block*> free_;
};

}  // namespace gpumux
