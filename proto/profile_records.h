#pragma once

// Conversions between profile.proto's records and gpumux/common/profile_data.h's
// structs, shared by the daemon (its Profile service and session stream) and
// libgpumux (its answer to StopProfiling, and the CLI reading the answers).

#include <cstdint>

#include "absl/time/time.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/profile_data.h"
#include "gpumux/v1/profile.pb.h"

namespace gpumux {

void ToProto(const DeviceProfile& profile, v1::DeviceProfileRecords* out);
DeviceProfile FromProto(const v1::DeviceProfileRecords& records);

void ToProto(const HostProfile& profile, v1::HostProfileRecords* out);
// Spans naming a function the records do not list are dropped (counted in
// dropped_calls): the daemon passes a client's answer on as it came.
HostProfile FromProto(const v1::HostProfileRecords& records);

SessionProfile FromProto(const v1::ProfileSessionResponse& response);
// A window of `duration` on `session`, keeping `capacity` records a side
// (0: the daemon's default); Profile's and Admin's ProfileSession take it.
v1::ProfileSessionRequest ProfileSessionRequestOf(SessionId session, absl::Duration duration,
                                                  uint64_t capacity);

}  // namespace gpumux
