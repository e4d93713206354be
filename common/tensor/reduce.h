#pragma once

// Element-wise reductions for the collectives (torch.cuda.comm's reduce_add,
// all_reduce's sum, prod, min, max and avg) computed on the host: the host
// backend's engine runs them, and they are the reference for the CUDA
// fallback's kernel.
//
// Each step combines two operands as PyTorch's element-wise kernel does for
// two tensors of the dtype:
// - f16 and bf16 are computed in f32 and rounded to nearest even after every
//   step (torch.add of two half tensors; reduce_add's fallback adds the
//   inputs one after another, so a sum is rounded once per input);
// - f32 and f64 in their own type;
// - int32, int64 and uint8 in their own type, wrapping around in two's
//   complement as torch's kernels do (no undefined overflow here);
// - min and max propagate NaN (torch.minimum, torch.maximum).
// The dtypes are the RNG's (common/tensor/rng_fill.h): every dtype gpumux fills.

#include <cstdint>

#include "common/tensor/rng_fill.h"
#include "gpumux/common/reduce_op.h"

namespace gpumux {

// "sum", "prod", "min", "max", "avg" (torch.distributed.ReduceOp's names).
const char* ReduceOpName(ReduceOp op);

// dst[i] = op(dst[i], src[i]) for `count` elements of `dtype`; kAvg adds
// (FinishAverage divides once every input is in). No alignment is needed;
// dst and src are the same memory or do not overlap. Thread-safe.
void Accumulate(ReduceOp op, RngDtype dtype, void* dst, const void* src, uint64_t count);

// kAvg's last step over `ranks` (at least 1) inputs: data[i] / ranks,
// computed in f32 for f16 and bf16 and rounded once; integers truncate toward
// zero (NCCL's ncclAvg on integers, torch.div(rounding_mode="trunc")).
void FinishAverage(RngDtype dtype, void* data, uint64_t count, int ranks);

}  // namespace gpumux
