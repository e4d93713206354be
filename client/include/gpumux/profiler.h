#pragma once

// Profiles of a Client's sessions: the device side of `gpumux bottleneck`
// and `gpumux profile` (the records in gpumux/common/profile_data.h).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpumux/client.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/profile_data.h"

namespace gpumux {
namespace profiler {

// A profile this session owns: sessions that open with its token (a
// program run with GPUMUX_PROFILE naming a region file that holds it, see
// client/profile_region.h) have their device work recorded into it, up to
// `capacity` records (0: 65,536; INVALID_ARGUMENT above 16,777,216).
struct StartedProfile {
  uint64_t id = 0;
  std::string token;
};
absl::StatusOr<StartedProfile> Start(Client& client, uint64_t capacity = 0);
// Ends profile `id` and returns its device side (NOT_FOUND: not this
// session's open profile).
absl::StatusOr<DeviceProfile> Finish(Client& client, uint64_t id);
// Profiles live session `session` of this session's tenant for `duration`
// (PERMISSION_DENIED for another tenant's: Admin::ProfileSession profiles
// any). NOT_FOUND for a session that is not open; INVALID_ARGUMENT for a
// duration outside 1 ms .. 1 hour; FAILED_PRECONDITION when it is being
// profiled already.
absl::StatusOr<SessionProfile> ProfileSession(Client& client, SessionId session,
                                              absl::Duration duration, uint64_t capacity = 0);

}  // namespace profiler
}  // namespace gpumux
