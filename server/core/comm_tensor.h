#pragma once

// CommTensor: a tensor as torch.cuda.comm's calls name it to the daemon:
// contiguous and row-major, described by memory (an allocation of the
// session, or a lease and an offset for local memory), dtype and shape.
// CommWork, CommPlan and the rules in comm_rules.h share it.

#include <cstdint>

#include "common/tensor/rng_fill.h"
#include "common/tensor/tensor_chunks.h"
#include "gpumux/common/ids.h"

namespace gpumux {

struct CommTensor {
  AllocationId id;  // 0 for a tensor without elements: no memory
  uint64_t offset = 0;
  RngDtype dtype = RngDtype::kF32;
  Shape shape;
  // Only for a tensor without memory (id 0), which has no allocation to
  // tell its device.
  DeviceIndex device;
};

}  // namespace gpumux
