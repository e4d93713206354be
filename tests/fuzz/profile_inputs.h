#pragma once

// Live-profile requests as the Profile and Admin fuzz targets send them:
// ProfileSession blocks for its duration, so a window longer than 20 ms,
// which would hold up the fuzzer (or pass a call's deadline), is left out;
// everything the daemon refuses goes through.

#include "gpumux/v1/profile.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

inline bool OutlastsAFuzzCall(const v1::ProfileSessionRequest& request) {
  return request.duration_ms() > 20 && request.duration_ms() <= 3600 * 1000;
}

// The ProfileSession method of `Service` (Profile or Admin), with seeds that
// profile the harness's session, one that is not open, and bad durations
// and capacities.
template <typename Service>
FuzzMethod ProfileSessionMethod() {
  return Unless<v1::ProfileSessionRequest>(
      Unary<Service>("ProfileSession", &Service::Stub::ProfileSession,
                     {"session_id: 1 duration_ms: 5", "session_id: 1 duration_ms: 1 capacity: 1",
                      "session_id: 999 duration_ms: 5", "session_id: 0 duration_ms: 5",
                      "session_id: 1 duration_ms: 0", "session_id: 1 duration_ms: -1",
                      "session_id: 1 duration_ms: 7200000",
                      "session_id: 1 duration_ms: 5 capacity: 16777217"}),
      OutlastsAFuzzCall);
}

}  // namespace gpumux::fuzz
