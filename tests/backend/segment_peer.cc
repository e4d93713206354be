// segment_peer: maps a DeviceBackend segment handle in a separate process, as
// a client would, for the conformance suite's cross-process checks.
//
//   segment_peer fill <kind> <hex handle> <size> <seed>
//   segment_peer gone <kind> <hex handle>
//
// segment_peer.h describes both and the exit codes. <kind> is "shm"
// (SegmentHandle::Kind::kHostShm); a CUDA build would add "cuda".

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "tests/backend/segment_peer.h"

namespace {

using gpumux::testing::kPeerCannotOpen;
using gpumux::testing::kPeerNotZero;
using gpumux::testing::kPeerOk;
using gpumux::testing::kPeerStillOpenable;
using gpumux::testing::kPeerUsage;

int Fill(const std::string& name, uint64_t size, uint32_t seed) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    std::fprintf(stderr, "segment_peer: shm_open(%s): %s\n", name.c_str(), std::strerror(errno));
    return kPeerCannotOpen;
  }
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) {
    std::fprintf(stderr, "segment_peer: mmap(%s): %s\n", name.c_str(), std::strerror(errno));
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

int Gone(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0 && errno == ENOENT) return kPeerOk;
  if (fd >= 0) close(fd);
  return kPeerStillOpenable;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || std::strcmp(argv[2], "shm") != 0) {
    std::fprintf(stderr, "usage: segment_peer fill|gone shm <hex handle> [<size> <seed>]\n");
    return kPeerUsage;
  }
  const std::string name = absl::HexStringToBytes(argv[3]);
  if (std::strcmp(argv[1], "gone") == 0 && argc == 4) return Gone(name);
  uint64_t size = 0;
  uint32_t seed = 0;
  if (std::strcmp(argv[1], "fill") == 0 && argc == 6 && absl::SimpleAtoi(argv[4], &size) &&
      absl::SimpleAtoi(argv[5], &seed)) {
    return Fill(name, size, seed);
  }
  std::fprintf(stderr, "segment_peer: bad arguments\n");
  return kPeerUsage;
}
