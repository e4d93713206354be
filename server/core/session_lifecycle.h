#pragma once

// Opening and ending a session across the registry, the memory books, the
// streams and events, staging buffers, RNG generators and NVTX ranges, and
// the one log line that says what an ended session left behind.
//
// Thread-safe: it holds no state of its own, and each book it calls locks
// for itself; calls for different sessions run concurrently. For one
// session, Close must come after its Open returned (the session service
// closes only a session whose Open it saw succeed); a second Close does
// nothing.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/core/device_profiler.h"
#include "server/core/group_registry.h"
#include "server/core/memory_manager.h"
#include "server/core/notice_sink.h"
#include "server/core/nvtx_ranges.h"
#include "server/core/rng_generators.h"
#include "server/core/session_registry.h"
#include "server/core/staging_buffers.h"
#include "server/core/stream_manager.h"

namespace gpumux {

// Running totals since the daemon started, for /metrics.
struct SessionCounts {
  uint64_t opened = 0;
  std::array<uint64_t, kSessionEndReasons> ended{};  // by SessionEndReason
  // Of ended sessions: bytes of blocks still allocated to them, freed, and
  // bytes of their segments returned to the devices.
  uint64_t reclaimed_allocated_bytes = 0;
  uint64_t reclaimed_reserved_bytes = 0;
};

class SessionLifecycle {
 public:
  // All must outlive this object; `profiler` may be null (no profiles),
  // `groups` too (no groups end with their sessions).
  SessionLifecycle(SessionRegistry* sessions, MemoryManager* memory, StreamManager* streams,
                   StagingBuffers* staging, RngGenerators* rng, NvtxRanges* nvtx,
                   DeviceProfiler* profiler = nullptr, GroupRegistry* groups = nullptr)
      : sessions_(sessions),
        memory_(memory),
        streams_(streams),
        staging_(staging),
        rng_(rng),
        nvtx_(nvtx),
        profiler_(profiler),
        groups_(groups) {}

  // The longest profile token taken (tokens are 32 hex digits).
  static constexpr size_t kMaxProfileTokenBytes = 256;

  // Registers the session and starts its books; with a `profile_token`, the
  // session joins that profile (DeviceProfiler::Join; a token of no open
  // profile is logged and ignored: the program runs unprofiled). Errors as
  // SessionRegistry::Open, and INVALID_ARGUMENT for a token over
  // kMaxProfileTokenBytes.
  absl::StatusOr<OpenedSession> Open(SessionRecord info, std::shared_ptr<NoticeSink> sink,
                                     absl::string_view profile_token = "");

  // Ends the session: no call authenticates as it any more, everything it
  // held is released, and one info line is logged with `reason`, `detail`
  // and what was reclaimed. A second call for the same id does nothing.
  void Close(SessionId id, SessionEndReason reason, absl::string_view detail);

  // An operator ends the session as if its client had died: its stream ends
  // with UNAVAILABLE "session N was killed by an operator: <reason>" and
  // everything it held is reclaimed before this returns. NOT_FOUND "no
  // session N is open" for a session that is not open.
  absl::Status Kill(SessionId id, absl::string_view reason);

  SessionCounts counts() const;

 private:
  SessionRegistry* sessions_;
  MemoryManager* memory_;
  StreamManager* streams_;
  StagingBuffers* staging_;
  RngGenerators* rng_;
  NvtxRanges* nvtx_;
  DeviceProfiler* profiler_;
  GroupRegistry* groups_;
  std::atomic<uint64_t> opened_{0};
  std::array<std::atomic<uint64_t>, kSessionEndReasons> ended_{};
  std::atomic<uint64_t> reclaimed_allocated_bytes_{0};
  std::atomic<uint64_t> reclaimed_reserved_bytes_{0};
};

}  // namespace gpumux
