#pragma once

// The CUDA collectives' element-wise reduction without NCCL: common/tensor/reduce.h's
// steps written by a kernel. Plain C++ on purpose (nvcc compiles the .cu
// without Abseil); CudaBackend checks ranges and devices first.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpumux {

// dst[i] = op(dst[i], src[i]) for `count` elements on `stream` (whose device
// must be current; `src` on it or on a peer it can read). `op` and `dtype`
// are ReduceOp and RngDtype values; kAvg adds. Neither pointer needs
// alignment. cudaErrorInvalidValue for an unknown op or dtype; otherwise the
// launch's error.
cudaError_t LaunchReduce(cudaStream_t stream, int op, int dtype, void* dst, const void* src,
                         uint64_t count);

// common/tensor/reduce.h's FinishAverage on the device.
cudaError_t LaunchFinishAverage(cudaStream_t stream, int dtype, void* data, uint64_t count,
                                int ranks);

}  // namespace gpumux
