#pragma once

// Profiling a live session for a while (`gpumux profile`): a DeviceProfiler
// window on the session's device side, and its client library asked over the
// session's stream for the host side at the end. Who may is the caller's
// business (Admin.ProfileSession, Profile.ProfileSession).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/profile_data.h"
#include "server/core/device_profiler.h"
#include "server/core/session_registry.h"

namespace gpumux {

inline constexpr absl::Duration kMaxLiveProfile = absl::Hours(1);

// Profiles `session` for `duration` (ending early when the session ends or
// the daemon stops), keeping up to `capacity` records a side (0: the
// default), and waits up to `reply_timeout` for the client's host side
// (asking for one only where its client records calls:
// SessionRecord::records_host_calls).
// INVALID_ARGUMENT for a duration outside 1 ms .. kMaxLiveProfile or a
// capacity above DeviceProfiler::kMaxCapacity; NOT_FOUND for a session that
// is not open; FAILED_PRECONDITION when it is profiled already.
absl::StatusOr<SessionProfile> ProfileLiveSession(DeviceProfiler& profiler,
                                                  const SessionRegistry& sessions,
                                                  SessionId session, absl::Duration duration,
                                                  uint64_t capacity, absl::Duration reply_timeout);

}  // namespace gpumux
