#include "allocator/node_recycler.h"

namespace gpumux {

NodeRecycler::~NodeRecycler() {
  for (FreeList& list : lists_) {
    for (void* p : list.free) ::operator delete(p, std::align_val_t(list.alignment));
  }
}

}  // namespace gpumux
