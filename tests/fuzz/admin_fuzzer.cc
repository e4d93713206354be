// libFuzzer target for gpumux.v1.Admin, on the admin socket as root: tenant
// limits of any tenant (the harness's session is tenant "session-1") on any
// device, the tenant list, and kills of any session but the harness's own
// (whose end every later input would read as a failure).

#include "gpumux/v1/admin.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Admin;

namespace {

FuzzMethod KillSession() {
  FuzzMethod method =
      Unary<Admin>("KillSession", &Admin::Stub::KillSession,
                   {"session_id: 2 reason: 'drain'", "session_id: 0", "session_id: 999 reason: ''",
                    "session_id: 3 reason: 'a\\nb'", "session_id: 4 reason: '\\302\\233'"});
  // The daemon parses the bytes as this does: an input that names the
  // harness's session would kill it for the daemon too.
  method.call = [call = std::move(method.call)](FuzzHarness& harness, absl::string_view bytes) {
    v1::KillSessionRequest request;
    if (request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) &&
        request.session_id() == FuzzFixture::kSession) {
      return;
    }
    call(harness, bytes);
  };
  return method;
}

}  // namespace

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
          KillSession(),
      });
  return service;
}

}  // namespace gpumux::fuzz
