#include "server/rpc/admin_proto.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/printable_text.h"

namespace gpumux {

absl::StatusOr<TenantLimitChange> FromProto(const v1::SetTenantLimitRequest& request) {
  TenantLimitChange change;
  change.tenant = request.tenant();
  switch (request.target_case()) {
    case v1::SetTenantLimitRequest::kDevice:
      change.device = DeviceIndex(request.device());
      break;
    case v1::SetTenantLimitRequest::kAllDevices:
      if (!request.all_devices()) {
        return absl::InvalidArgumentError(
            "all_devices is false: set it true for every device, or name one device");
      }
      break;
    case v1::SetTenantLimitRequest::TARGET_NOT_SET:
      return absl::InvalidArgumentError(
          "no target: name one device, or set all_devices for every device");
  }
  switch (request.limit_case()) {
    case v1::SetTenantLimitRequest::kBytes:
      if (request.bytes() == 0) {
        return absl::InvalidArgumentError(
            "a byte limit must be positive; set unlimited to remove the limit");
      }
      change.limit_bytes = request.bytes();
      break;
    case v1::SetTenantLimitRequest::kUnlimited:
      if (!request.unlimited()) {
        return absl::InvalidArgumentError(
            "unlimited is false: set it true to remove the limit, or give bytes");
      }
      break;
    case v1::SetTenantLimitRequest::LIMIT_NOT_SET:
      return absl::InvalidArgumentError("no limit: give bytes, or set unlimited");
  }
  return change;
}

absl::StatusOr<SessionKill> FromProto(const v1::KillSessionRequest& request) {
  if (request.session_id() == 0) {
    return absl::InvalidArgumentError(
        "session_id is 0: name the session to kill (gpumux sessions lists them)");
  }
  const std::string& reason = request.reason();
  if (reason.size() > kMaxKillReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the reason is ", reason.size(), " bytes; at most ", kMaxKillReasonBytes, " are allowed"));
  }
  // The reason reaches the killed client's error and the daemon's log.
  if (absl::Status printable = CheckPrintable(
          "the reason", reason,
          "it is printed in the killed client's error and the daemon's log, so it must be "
          "printable");
      !printable.ok()) {
    return printable;
  }
  return SessionKill{.session = SessionId(request.session_id()), .reason = reason};
}

void ToProto(const std::vector<TenantUsage>& tenants, v1::ListTenantsResponse* out) {
  v1::TenantInfo* info = nullptr;
  for (const TenantUsage& usage : tenants) {
    if (info == nullptr || info->tenant() != usage.tenant) {
      info = out->add_tenants();
      info->set_tenant(usage.tenant);
    }
    v1::TenantDeviceUsage* device = info->add_devices();
    device->set_device(usage.device.value());
    device->set_limit_bytes(usage.limit_bytes);
    device->set_reserved_bytes(usage.reserved_bytes);
    device->set_allocated_bytes(usage.allocated_bytes);
    for (ClientId client : usage.clients) device->add_session_ids(client.value());
  }
}

}  // namespace gpumux
