#pragma once

// The reductions of the collectives (torch.distributed.ReduceOp's SUM,
// PRODUCT, MIN, MAX and AVG): a value type of the client's public API, apart
// from the host arithmetic of common/tensor/reduce.h.

namespace gpumux {

enum class ReduceOp { kSum, kProduct, kMin, kMax, kAvg };

}  // namespace gpumux
