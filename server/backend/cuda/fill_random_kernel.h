#pragma once

// The CUDA random fill: common/tensor/philox.h's stream, written by a kernel. Plain
// C++ on purpose (nvcc compiles the .cu without Abseil); CudaBackend validates
// the request with common/tensor/rng_fill.h first.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpumux {

// The request of common/tensor/rng_fill.h's FillRandom, field for field; `dtype`
// and `kind` are RngDtype and RngKind values.
struct FillRandomLaunch {
  int dtype = 0;
  int kind = 0;
  uint64_t elements = 0;
  double a = 0.0;
  double b = 1.0;
  uint64_t seed = 0;
  uint64_t offset = 0;  // generator offset before the call, a multiple of 4
};

// Queues the kernel on `stream` (whose device must be current): `dst` gets
// exactly the bits the host FillRandom writes (normal samples: within a few
// ulp). `dst` needs no alignment. cudaErrorInvalidValue for an unknown dtype
// or kind; otherwise the launch's error.
cudaError_t LaunchFillRandom(cudaStream_t stream, void* dst, const FillRandomLaunch& launch);

}  // namespace gpumux
