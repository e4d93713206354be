#pragma once

// BlockPool: PyTorch's BlockPool narrowed to one client and one stream: the
// cached free blocks of one size class (small or large), ordered by (size,
// address) so that lower_bound finds the best fit, ties going to the lower
// address, and the unmapped stretches of its expandable segments by address.
// Keeping a pool per (client, stream) gives PyTorch's order
// (stream, size, address) with the client in front, and shorter trees. Not
// thread-safe: the owning DeviceAllocator's mutex guards it.

#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "allocator/block.h"
#include "allocator/node_recycler.h"

namespace gpumux {

class BlockPool {
 public:
  struct Entry {
    uint64_t size = 0;
    uint64_t address = 0;
    Block* block = nullptr;  // not part of the order
  };
  struct EntryLess {
    // Nodes hold about ten entries: a linear scan with one mispredicted exit
    // beats a binary search that mispredicts at every step.
    using absl_btree_prefer_linear_node_search = std::true_type;
    // Branch-free (size, address) order: lower_bound runs many of these.
    bool operator()(const Entry& a, const Entry& b) const {
      return (a.size < b.size) | ((a.size == b.size) & (a.address < b.address));
    }
  };
  using Set = absl::btree_set<Entry, EntryLess, RecyclingAllocator<Entry>>;
  using Iterator = Set::const_iterator;

  explicit BlockPool(bool is_small)
      : is_small_(is_small), blocks_(EntryLess(), RecyclingAllocator<Entry>(&recycler_)) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  bool is_small() const { return is_small_; }
  bool empty() const { return blocks_.empty(); }
  size_t size() const { return blocks_.size(); }
  Iterator begin() const { return blocks_.begin(); }
  Iterator end() const { return blocks_.end(); }

  // Precondition: `block` is not in the pool. Crashes on a duplicate.
  void Insert(Block* block) {
    if (!blocks_.insert(Entry{block->size, block->address, block}).second)
      Die("cached twice", block);
  }
  // Precondition: `block` is in the pool with its current size and address.
  void Erase(Block* block) {
    auto it = blocks_.find(Entry{block->size, block->address, nullptr});
    if (it == blocks_.end()) Die("missing from its pool", block);
    blocks_.erase(it);
  }
  void Erase(Iterator it) { blocks_.erase(it); }

  // The smallest block of at least `size` (lowest address among equals).
  Iterator LowerBound(uint64_t size) const { return blocks_.lower_bound(Entry{size, 0, nullptr}); }

  // A copy of the cached blocks, in pool order, for loops that release them.
  std::vector<Block*> Blocks() const;

  // The unmapped blocks of the pool's expandable segments, by address
  // (PyTorch's BlockPool::unmapped).
  const absl::btree_map<uint64_t, Block*>& unmapped() const { return unmapped_; }
  void InsertUnmapped(Block* block) {
    if (!unmapped_.emplace(block->address, block).second) Die("unmapped twice", block);
  }
  void EraseUnmapped(Block* block) {
    if (unmapped_.erase(block->address) != 1) Die("missing from the unmapped set", block);
  }

 private:
  [[noreturn]] static void Die(const char* what, const Block* block);

  bool is_small_;
  NodeRecycler recycler_;  // outlives blocks_, whose nodes it recycles
  Set blocks_;
  absl::btree_map<uint64_t, Block*> unmapped_;
};

}  // namespace gpumux
