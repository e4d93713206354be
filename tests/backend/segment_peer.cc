// segment_peer: maps a DeviceBackend segment handle in a separate process, as
// a client would, for the conformance suite's cross-process checks.
//
//   segment_peer fill memfd <descriptor> <size> <seed>
//   segment_peer fill|gone cuda <hex handle> [<size> <seed>]
//
// segment_peer.h describes both and the exit codes. "memfd"
// (SegmentHandle::Kind::kHostMemfd): the segment's memory file is the
// inherited descriptor <descriptor>, as a client receives it from the memory
// socket; "cuda", in CUDA builds (kCudaIpc): the handle is opened with
// cudaIpcOpenMemHandle on the current device.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#ifdef GPUMUX_PEER_CUDA
#include <cuda_runtime_api.h>

#include <vector>
#endif

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "tests/backend/segment_peer.h"

namespace {

using gpumux::testing::kPeerCannotOpen;
using gpumux::testing::kPeerNotZero;
using gpumux::testing::kPeerOk;
using gpumux::testing::kPeerStillOpenable;
using gpumux::testing::kPeerUsage;

int Fill(int fd, uint64_t size, uint32_t seed) {
  // A client insists on the seals: nobody can shrink the file under it.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    std::fprintf(stderr,
                 "segment_peer: descriptor %d is not a memory file sealed against resizing\n", fd);
    return kPeerCannotOpen;
  }
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) {
    std::fprintf(stderr, "segment_peer: mmap(descriptor %d): %s\n", fd, std::strerror(errno));
    return kPeerCannotOpen;
  }
  auto* bytes = static_cast<uint8_t*>(mapped);
  for (uint64_t i = 0; i < size; ++i) {
    if (bytes[i] != 0) {
      std::fprintf(stderr, "segment_peer: byte %llu is %u, not 0\n",
                   static_cast<unsigned long long>(i), bytes[i]);
      return kPeerNotZero;
    }
  }
  for (uint64_t i = 0; i < size; ++i) bytes[i] = gpumux::testing::PeerPatternByte(i, seed);
  munmap(mapped, size);
  return kPeerOk;
}

#ifdef GPUMUX_PEER_CUDA
bool OpenCuda(const std::string& handle, void** base) {
  cudaIpcMemHandle_t ipc;
  if (handle.size() != sizeof(ipc)) return false;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  const cudaError_t error = cudaIpcOpenMemHandle(base, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (error != cudaSuccess) {
    std::fprintf(stderr, "segment_peer: cudaIpcOpenMemHandle: %s\n", cudaGetErrorName(error));
    return false;
  }
  return true;
}

int FillCuda(const std::string& handle, uint64_t size, uint32_t seed) {
  void* base = nullptr;
  if (!OpenCuda(handle, &base)) return kPeerCannotOpen;
  std::vector<uint8_t> bytes(size);
  if (cudaMemcpy(bytes.data(), base, size, cudaMemcpyDeviceToHost) != cudaSuccess)
    return kPeerCannotOpen;
  for (uint64_t i = 0; i < size; ++i) {
    if (bytes[i] != 0) {
      std::fprintf(stderr, "segment_peer: byte %llu is %u, not 0\n",
                   static_cast<unsigned long long>(i), bytes[i]);
      return kPeerNotZero;
    }
  }
  for (uint64_t i = 0; i < size; ++i) bytes[i] = gpumux::testing::PeerPatternByte(i, seed);
  if (cudaMemcpy(base, bytes.data(), size, cudaMemcpyHostToDevice) != cudaSuccess)
    return kPeerCannotOpen;
  return cudaIpcCloseMemHandle(base) == cudaSuccess ? kPeerOk : kPeerCannotOpen;
}

int GoneCuda(const std::string& handle) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "segment_peer: no CUDA device: cannot tell whether the handle opens\n");
    return kPeerUsage;
  }
  void* base = nullptr;
  if (!OpenCuda(handle, &base)) return kPeerOk;
  cudaIpcCloseMemHandle(base);
  return kPeerStillOpenable;
}
#endif  // GPUMUX_PEER_CUDA

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc >= 3 && std::strcmp(argv[2], "cuda") == 0;
#ifndef GPUMUX_PEER_CUDA
  if (cuda) {
    std::fprintf(stderr, "segment_peer: built without CUDA\n");
    return kPeerUsage;
  }
#endif
  if (argc < 4 || (std::strcmp(argv[2], "memfd") != 0 && !cuda)) {
    std::fprintf(
        stderr,
        "usage: segment_peer fill memfd <descriptor> <size> <seed> | fill|gone cuda <hex handle> "
        "[<size> <seed>]\n");
    return kPeerUsage;
  }
#ifdef GPUMUX_PEER_CUDA
  if (cuda && std::strcmp(argv[1], "gone") == 0 && argc == 4)
    return GoneCuda(absl::HexStringToBytes(argv[3]));
#endif
  uint64_t size = 0;
  uint32_t seed = 0;
  if (std::strcmp(argv[1], "fill") == 0 && argc == 6 && absl::SimpleAtoi(argv[4], &size) &&
      absl::SimpleAtoi(argv[5], &seed)) {
#ifdef GPUMUX_PEER_CUDA
    if (cuda) return FillCuda(absl::HexStringToBytes(argv[3]), size, seed);
#endif
    int fd = -1;
    if (!cuda && absl::SimpleAtoi(argv[3], &fd) && fd >= 0) return Fill(fd, size, seed);
  }
  std::fprintf(stderr, "segment_peer: bad arguments\n");
  return kPeerUsage;
}
