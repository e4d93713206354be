#pragma once

// Kernels the GPU tests run on daemon memory from their own processes, as
// a client application would. Plain C++ over the CUDA runtime.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpumux::testing {

// The word WritePattern stores at `index` for `seed`.
inline uint32_t PatternWord(uint64_t index, uint32_t seed) {
  return static_cast<uint32_t>(index * 2654435761u) ^ seed;
}

// Loads every kernel below now: CUDA loads a kernel lazily on its first
// launch, and the load may wait for work already queued (a test that queues
// a spin and then a second kernel would otherwise see the spin end first).
cudaError_t LoadTestKernels();

// data[i] = PatternWord(i, seed) for i < n.
cudaError_t LaunchWritePattern(uint32_t* data, uint64_t n, uint32_t seed, cudaStream_t stream);
// Counts i with data[i] != PatternWord(i, seed) (or its complement when
// `complemented`) into *mismatches (device memory, added to).
cudaError_t LaunchCountMismatches(const uint32_t* data, uint64_t n, uint32_t seed,
                                  bool complemented, unsigned long long* mismatches,
                                  cudaStream_t stream);
// Counts mismatches against PatternWord(i, seed), then complements every word.
cudaError_t LaunchCheckAndComplement(uint32_t* data, uint64_t n, uint32_t seed,
                                     unsigned long long* mismatches, cudaStream_t stream);
// One thread that spins for `nanoseconds` of GPU time (%globaltimer).
cudaError_t LaunchSpin(uint64_t nanoseconds, cudaStream_t stream);
// One thread that writes through a null pointer: an illegal address, a
// sticky error that loses the context.
cudaError_t LaunchFault(cudaStream_t stream);

}  // namespace gpumux::testing
