#pragma once

// The protocol between the conformance suite and segment_peer, the helper
// program that maps a segment handle in another process as a client would.
// RunPeerFill/RunPeerGone fork and exec it (GPUMUX_SEGMENT_PEER), so the child
// shares nothing with the test but the handle (CUDA) or the segment's memory
// file (host backend: the descriptor the memory socket would hand a client,
// inherited).

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/backend/device_backend.h"
#include "server/backend/host/host_backend.h"
#include "server/backend/memory_file_table.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {

// segment_peer's exit codes.
inline constexpr int kPeerOk = 0;
inline constexpr int kPeerStillOpenable = 1;  // "gone": the handle still opens
inline constexpr int kPeerUsage = 2;
inline constexpr int kPeerCannotOpen = 3;
inline constexpr int kPeerNotZero = 4;

// The byte segment_peer writes at `offset` when told `seed`.
inline uint8_t PeerPatternByte(uint64_t offset, uint32_t seed) {
  return static_cast<uint8_t>((offset * 131 + seed) % 251);
}

inline std::string PeerKindArg(SegmentHandle::Kind kind) {
  return kind == SegmentHandle::Kind::kHostMemfd ? "memfd" : "cuda";
}

// The memory file a host-backend handle names, as the memory socket would
// hand it out; null for another backend or a key no longer filed.
inline std::shared_ptr<const SealedMemory> PeerMemoryFile(const DeviceBackend& backend,
                                                          const SegmentHandle& handle) {
  const auto* host = dynamic_cast<const HostBackend*>(&backend);
  if (host == nullptr || handle.kind != SegmentHandle::Kind::kHostMemfd) return nullptr;
  absl::StatusOr<std::shared_ptr<const SealedMemory>> memory =
      host->memory_files().Find(handle.data, MemoryFileTable::kAnySession);
  return memory.ok() ? *memory : nullptr;
}

#ifdef GPUMUX_SEGMENT_PEER
// Runs segment_peer with `args`, the child inheriting `inherit` (-1: none);
// its exit code, or -1 when it did not exit.
inline int RunPeer(std::vector<std::string> args, int inherit = -1) {
  args.insert(args.begin(), TestBinary(GPUMUX_SEGMENT_PEER));
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    if (inherit >= 0) fcntl(inherit, F_SETFD, 0);  // the child's copy only
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) return -1;
  int wstatus = 0;
  if (waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus)) return -1;
  return WEXITSTATUS(wstatus);
}

// Maps `segment` in a child, checks it reads as zeros, fills it with
// PeerPatternByte(i, seed). kPeerOk on success.
inline int RunPeerFill(const DeviceBackend& backend, const BackendSegment& segment, uint32_t seed) {
  if (segment.handle.kind == SegmentHandle::Kind::kHostMemfd) {
    std::shared_ptr<const SealedMemory> memory = PeerMemoryFile(backend, segment.handle);
    if (memory == nullptr) return kPeerCannotOpen;
    return RunPeer({"fill", "memfd", absl::StrCat(memory->fd()), absl::StrCat(segment.size),
                    absl::StrCat(seed)},
                   memory->fd());
  }
  return RunPeer({"fill", PeerKindArg(segment.handle.kind),
                  absl::BytesToHexString(segment.handle.data), absl::StrCat(segment.size),
                  absl::StrCat(seed)});
}

// kPeerOk when `handle` can no longer be opened, kPeerStillOpenable when it
// can: by a child for CUDA; for the host backend, whether the memory socket
// would still hand its file out (a released key is not filed any more).
inline int RunPeerGone(const DeviceBackend& backend, const SegmentHandle& handle) {
  if (handle.kind == SegmentHandle::Kind::kHostMemfd) {
    return PeerMemoryFile(backend, handle) == nullptr ? kPeerOk : kPeerStillOpenable;
  }
  return RunPeer({"gone", PeerKindArg(handle.kind), absl::BytesToHexString(handle.data)});
}
#endif  // GPUMUX_SEGMENT_PEER

}  // namespace gpumux::testing
