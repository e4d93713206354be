#pragma once

// The protocol between the conformance suite and segment_peer, the helper
// program that maps a segment handle in another process as a client would.
// RunPeerFill/RunPeerGone fork and exec it (GPUMUX_SEGMENT_PEER), so the child
// shares nothing with the test but the handle.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/backend/device_backend.h"
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
  return kind == SegmentHandle::Kind::kHostShm ? "shm" : "cuda";
}

#ifdef GPUMUX_SEGMENT_PEER
// Runs segment_peer with `args`; its exit code, or -1 when it did not exit.
inline int RunPeer(std::vector<std::string> args) {
  args.insert(args.begin(), TestBinary(GPUMUX_SEGMENT_PEER));
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
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
inline int RunPeerFill(const BackendSegment& segment, uint32_t seed) {
  return RunPeer({"fill", PeerKindArg(segment.handle.kind),
                  absl::BytesToHexString(segment.handle.data), absl::StrCat(segment.size),
                  absl::StrCat(seed)});
}

// kPeerOk when a child can no longer open `handle`, kPeerStillOpenable when it can.
inline int RunPeerGone(const SegmentHandle& handle) {
  return RunPeer({"gone", PeerKindArg(handle.kind), absl::BytesToHexString(handle.data)});
}
#endif  // GPUMUX_SEGMENT_PEER

}  // namespace gpumux::testing
