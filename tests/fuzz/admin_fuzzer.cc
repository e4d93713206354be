// libFuzzer target for gpumux.v1.Admin, on the admin socket as root: tenant
// limits of any tenant (the harness's session is tenant "session-1") on any
// device, the tenant list, and kills of any session but the harness's own
// (whose end every later input would read as a failure), and live profiles
// of any session for up to 20 ms, and every session's cache emptied.

#include "gpumux/v1/admin.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/profile_inputs.h"

namespace gpumux::fuzz {

using v1::Admin;

const FuzzService& TargetService() {
  static const FuzzService service(
      Admin::service_full_name(),
      {
          Unary<Admin>("SetTenantLimit", &Admin::Stub::SetTenantLimit,
                       {"tenant: 'pod' device: 0 bytes: 4096",
                        "tenant: 'pod' all_devices: true "
                        "unlimited: true",
                        "tenant: 'session-1' device: 1 bytes: 1", "tenant: '' device: 0 bytes: 1",
                        "tenant: 'pod' device: -1 bytes: 1", "tenant: 'pod' all_devices: false"}),
          Unary<Admin>("ListTenants", &Admin::Stub::ListTenants, {""}),
          // Not the harness's own session: its end would fail every later input.
          Unless<v1::KillSessionRequest>(
              Unary<Admin>(
                  "KillSession", &Admin::Stub::KillSession,
                  {"session_id: 2 reason: 'drain'", "session_id: 0", "session_id: 999 reason: ''",
                   "session_id: 3 reason: 'a\\nb'", "session_id: 4 reason: '\\302\\233'"}),
              [](const v1::KillSessionRequest& request) {
                return request.session_id() == FuzzFixture::kSession;
              }),
          ProfileSessionMethod<Admin>(),
          Unary<Admin>("EmptyCache", &Admin::Stub::EmptyCache,
                       {"device: 0", "all_devices: true", "all_devices: false", "device: -1",
                        "device: 99", ""}),
      });
  return service;
}

}  // namespace gpumux::fuzz
