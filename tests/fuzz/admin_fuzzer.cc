// libFuzzer target for gpumux.v1.Admin, on the admin socket as root: tenant
// limits of any tenant (the harness's session is tenant "session-1") on any
// device, and the tenant list.

#include "gpumux/v1/admin.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

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
      });
  return service;
}

}  // namespace gpumux::fuzz
