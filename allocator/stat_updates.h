#pragma once

// The stat arithmetic every DeviceAllocator source shares: a change lands on
// the "all" entry and on the block's pool entry, as PyTorch's
// for_each_selected_stat_type does.

#include <cstdint>

#include "absl/base/attributes.h"
#include "common/formats/memory_stats.h"

namespace gpumux {

inline int PoolStat(bool is_small) { return is_small ? kSmallPool : kLargePool; }

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Increase(StatArray& array, int pool, int64_t amount) {
  array[kAggregate].Increase(amount);
  array[pool].Increase(amount);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Decrease(StatArray& array, int pool, int64_t amount) {
  array[kAggregate].Decrease(amount);
  array[pool].Decrease(amount);
}

inline int64_t Bytes(uint64_t n) { return static_cast<int64_t>(n); }

}  // namespace gpumux
