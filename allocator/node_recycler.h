#pragma once

// NodeRecycler and RecyclingAllocator: a std-style allocator that keeps the
// memory it is given back on per-size free lists instead of returning it to
// malloc. A BlockPool's btree splits and merges nodes as blocks come and go;
// recycling them keeps malloc off the allocator's hot path once a pool has
// reached its working size. Not thread-safe: the owner's lock guards it.

#include <cstddef>
#include <new>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace gpumux {

class NodeRecycler {
 public:
  NodeRecycler() = default;
  NodeRecycler(const NodeRecycler&) = delete;
  NodeRecycler& operator=(const NodeRecycler&) = delete;
  // Precondition: everything allocated was deallocated.
  ~NodeRecycler();

  void* Allocate(size_t bytes, size_t alignment) {
    FreeList& list = ListFor(bytes, alignment);
    if (list.free.empty()) return ::operator new(bytes, std::align_val_t(alignment));
    void* p = list.free.back();
    list.free.pop_back();
    return p;
  }
  void Deallocate(void* p, size_t bytes, size_t alignment) {
    ListFor(bytes, alignment).free.push_back(p);
  }

 private:
  struct FreeList {
    size_t bytes;
    size_t alignment;
    std::vector<void*> free;
  };
  // A btree asks for two sizes (leaf and internal nodes): a linear scan wins.
  FreeList& ListFor(size_t bytes, size_t alignment) {
    for (FreeList& list : lists_) {
      if (list.bytes == bytes && list.alignment == alignment) return list;
    }
    return lists_.emplace_back(FreeList{bytes, alignment, {}});
  }

  absl::InlinedVector<FreeList, 2> lists_;
};

template <typename T>
class RecyclingAllocator {
 public:
  using value_type = T;

  explicit RecyclingAllocator(NodeRecycler* recycler) : recycler_(recycler) {}
  template <typename U>
  RecyclingAllocator(const RecyclingAllocator<U>& other)  // NOLINT: rebinding
      : recycler_(other.recycler()) {}

  T* allocate(size_t n) { return static_cast<T*>(recycler_->Allocate(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, size_t n) { recycler_->Deallocate(p, n * sizeof(T), alignof(T)); }

  NodeRecycler* recycler() const { return recycler_; }
  template <typename U>
  bool operator==(const RecyclingAllocator<U>& other) const {
    return recycler_ == other.recycler();
  }

 private:
  NodeRecycler* recycler_;
};

}  // namespace gpumux
