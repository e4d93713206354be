// libFuzzer target for gpumux.v1.Observe: the session list, and stats,
// summaries and snapshots of any device and session (1 is the harness's).

#include "gpumux/v1/observe.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Observe;

const FuzzService& TargetService() {
  static const FuzzService service(
      Observe::service_full_name(),
      {
          Unary<Observe>("ListSessions", &Observe::Stub::ListSessions, {""}),
          Unary<Observe>("GetMemoryStats", &Observe::Stub::GetMemoryStats,
                         {"device: 0 session_id: 1", "device: 1", "device: 0 session_id: 99"}),
          Unary<Observe>("GetMemorySummary", &Observe::Stub::GetMemorySummary,
                         {"device: 0 session_id: 1 abbreviated: true", "device: 1"}),
          Unary<Observe>("GetMemorySnapshot", &Observe::Stub::GetMemorySnapshot,
                         {"device: 0 session_id: 1", "all_devices: true"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
