// gpu_client_child: a second client process for the GPU tests, running its
// own kernels on daemon memory.
//
//   gpu_client_child share-reader <address> <hex token> <words> <seed>
//     Imports the shared allocation, checks PatternWord(i, seed) with a
//     kernel and complements every word; prints "mismatches N".
//   gpu_client_child hog <address> <bytes>
//     Allocates `bytes` on device 0, writes them with a kernel, prints
//     "ready", then sleeps until killed.
//
// Exit codes: 0 done, 2 usage, 3 a gpumux call failed, 4 a CUDA call failed.

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "tests/gpu/test_kernels.h"

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "gpu_client_child: %s\n", status.ToString().c_str());
  return 3;
}

int CudaFail(cudaError_t error, const char* what) {
  std::fprintf(stderr, "gpu_client_child: %s: %s\n", what, cudaGetErrorName(error));
  return 4;
}

int ShareReader(const std::string& address, const std::string& token, uint64_t words,
                uint32_t seed) {
  absl::StatusOr<std::unique_ptr<gpumux::Client>> client = gpumux::Client::Connect(address);
  if (!client.ok()) return Fail(client.status());
  absl::StatusOr<gpumux::DeviceBuffer> buffer = gpumux::memory::Import(*(*client), token);
  if (!buffer.ok()) return Fail(buffer.status());
  if (buffer->data() == nullptr || buffer->size() < words * 4)
    return Fail(absl::InternalError("no mapping"));
  unsigned long long* mismatches = nullptr;
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&mismatches), sizeof(*mismatches));
      e != cudaSuccess) {
    return CudaFail(e, "cudaMalloc");
  }
  cudaMemset(mismatches, 0, sizeof(*mismatches));
  cudaError_t e = gpumux::testing::LaunchCheckAndComplement(static_cast<uint32_t*>(buffer->data()),
                                                            words, seed, mismatches, nullptr);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return CudaFail(e, "kernel");
  unsigned long long count = 0;
  cudaMemcpy(&count, mismatches, sizeof(count), cudaMemcpyDeviceToHost);
  std::printf("mismatches %llu\n", count);
  std::fflush(stdout);
  return 0;  // the buffer's free is fenced by the kernel (legacy stream)
}

int Hog(const std::string& address, uint64_t bytes) {
  absl::StatusOr<std::unique_ptr<gpumux::Client>> client = gpumux::Client::Connect(address);
  if (!client.ok()) return Fail(client.status());
  absl::StatusOr<gpumux::DeviceBuffer> buffer =
      gpumux::memory::Allocate(*(*client), bytes, gpumux::DeviceIndex(0));
  if (!buffer.ok()) return Fail(buffer.status());
  if (buffer->data() == nullptr) return Fail(absl::InternalError("no mapping"));
  cudaError_t e = gpumux::testing::LaunchWritePattern(static_cast<uint32_t*>(buffer->data()),
                                                      bytes / 4, 1, nullptr);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return CudaFail(e, "kernel");
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (cudaError_t e = gpumux::testing::LoadTestKernels(); e != cudaSuccess)
    return CudaFail(e, "loading kernels");
  uint64_t words = 0;
  uint32_t seed = 0;
  if (argc == 6 && std::strcmp(argv[1], "share-reader") == 0 && absl::SimpleAtoi(argv[4], &words) &&
      absl::SimpleAtoi(argv[5], &seed)) {
    return ShareReader(argv[2], absl::HexStringToBytes(argv[3]), words, seed);
  }
  uint64_t bytes = 0;
  if (argc == 4 && std::strcmp(argv[1], "hog") == 0 && absl::SimpleAtoi(argv[3], &bytes)) {
    return Hog(argv[2], bytes);
  }
  std::fprintf(
      stderr,
      "usage: gpu_client_child share-reader ADDRESS HEX_TOKEN WORDS SEED | hog ADDRESS BYTES\n");
  return 2;
}
