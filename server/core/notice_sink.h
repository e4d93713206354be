#pragma once

// NoticeSink: how the core tells one session's client something without
// knowing the transport (the rpc layer implements it over the session stream).

#include <cstdint>

#include "absl/strings/string_view.h"
#include "gpumux/common/ids.h"

namespace gpumux {

// Why a session ended, as operators count it
// (gpumux_sessions_ended_total{reason}).
enum class SessionEndReason {
  kClosed,         // the client closed its session stream
  kCrashed,        // the stream broke: the client died or vanished
  kKilled,         // an operator ended it (gpumux kill-session)
  kShutdown,       // the daemon is shutting down
  kProtocolError,  // the client broke the session stream's protocol
};
inline constexpr int kSessionEndReasons = 5;

// "closed", "crashed", "killed", "shutdown" or "protocol_error".
constexpr absl::string_view SessionEndReasonName(SessionEndReason reason) {
  switch (reason) {
    case SessionEndReason::kClosed:
      return "closed";
    case SessionEndReason::kCrashed:
      return "crashed";
    case SessionEndReason::kKilled:
      return "killed";
    case SessionEndReason::kShutdown:
      return "shutdown";
    case SessionEndReason::kProtocolError:
      return "protocol_error";
  }
  return "closed";
}

class NoticeSink {
 public:
  virtual ~NoticeSink() = default;
  // The daemon returned a segment this session was handed (`size` 0), or
  // unmapped the pages [offset, offset + size) of an expandable one: the
  // client should unmap them. Must not block; may be called from any thread.
  virtual void SegmentReleased(DeviceIndex device, SegmentId segment, uint64_t offset,
                               uint64_t size) = 0;
  // Questions to a client that allocates locally (ClientQueries): return the
  // wholly free cached leases on `device`, and list the blocks of its
  // leases. The answers come back to ClientQueries under `request`. Must not
  // block.
  virtual void AskReleaseCached(uint64_t request, DeviceIndex device) = 0;
  virtual void AskLeaseBlocks(uint64_t request) = 0;
  // A window of `gpumux profile` on this session (DeviceProfiler): start
  // recording the host side, with room for `capacity` calls; stop and send
  // what was recorded (to DeviceProfiler::OnHostProfile) under `window`.
  // Must not block.
  virtual void StartProfiling(uint64_t window, uint64_t capacity) = 0;
  virtual void StopProfiling(uint64_t window) = 0;
  // The daemon is ending the session (shutdown, or an operator's kill): end
  // the transport's side of it with UNAVAILABLE and `message`, and close the
  // session with `reason` before returning. Must not block on the client.
  virtual void Terminate(SessionEndReason reason, absl::string_view message) = 0;
};

}  // namespace gpumux
