#include "tests/gpu/test_kernels.h"

namespace gpumux::testing {
namespace {

__device__ uint32_t DevicePatternWord(uint64_t index, uint32_t seed) {
  return static_cast<uint32_t>(index * 2654435761u) ^ seed;
}

__global__ void WritePattern(uint32_t* data, uint64_t n, uint32_t seed) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    data[i] = DevicePatternWord(i, seed);
  }
}

__global__ void CountMismatches(const uint32_t* data, uint64_t n, uint32_t seed, bool complemented,
                                unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint32_t expected =
        complemented ? ~DevicePatternWord(i, seed) : DevicePatternWord(i, seed);
    local += data[i] != expected;
  }
  if (local != 0) atomicAdd(mismatches, local);
}

__global__ void CheckAndComplement(uint32_t* data, uint64_t n, uint32_t seed,
                                   unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    local += data[i] != DevicePatternWord(i, seed);
    data[i] = ~data[i];
  }
  if (local != 0) atomicAdd(mismatches, local);
}

__global__ void Spin(uint64_t nanoseconds) {
  uint64_t start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= nanoseconds) break;
    __nanosleep(1000);
  }
}

__global__ void Fault() { *static_cast<volatile int*>(nullptr) = 1; }

constexpr int kThreads = 256;
constexpr int kBlocks = 1024;

}  // namespace

cudaError_t LoadTestKernels() {
  cudaFuncAttributes attributes;
  for (const void* kernel :
       {reinterpret_cast<const void*>(&WritePattern),
        reinterpret_cast<const void*>(&CountMismatches),
        reinterpret_cast<const void*>(&CheckAndComplement), reinterpret_cast<const void*>(&Spin),
        reinterpret_cast<const void*>(&Fault)}) {
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t LaunchWritePattern(uint32_t* data, uint64_t n, uint32_t seed, cudaStream_t stream) {
  WritePattern<<<kBlocks, kThreads, 0, stream>>>(data, n, seed);
  return cudaGetLastError();
}

cudaError_t LaunchCountMismatches(const uint32_t* data, uint64_t n, uint32_t seed,
                                  bool complemented, unsigned long long* mismatches,
                                  cudaStream_t stream) {
  CountMismatches<<<kBlocks, kThreads, 0, stream>>>(data, n, seed, complemented, mismatches);
  return cudaGetLastError();
}

cudaError_t LaunchCheckAndComplement(uint32_t* data, uint64_t n, uint32_t seed,
                                     unsigned long long* mismatches, cudaStream_t stream) {
  CheckAndComplement<<<kBlocks, kThreads, 0, stream>>>(data, n, seed, mismatches);
  return cudaGetLastError();
}

cudaError_t LaunchSpin(uint64_t nanoseconds, cudaStream_t stream) {
  Spin<<<1, 1, 0, stream>>>(nanoseconds);
  return cudaGetLastError();
}

cudaError_t LaunchFault(cudaStream_t stream) {
  Fault<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

}  // namespace gpumux::testing
