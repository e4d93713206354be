#include "gpumux/admin.h"

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/channel.h"
#include "client/grpc_status.h"
#include "common/base/status_macros.h"
#include "common/net/admin_socket.h"
#include "gpumux/v1/admin.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "proto/profile_records.h"

namespace gpumux {
namespace {

constexpr absl::Duration kAdminCallTimeout = absl::Seconds(30);

// The admin socket's target next to the daemon socket `address` names, or
// nullopt when `address` is not a Unix socket.
std::optional<std::string> AdminTarget(absl::string_view address) {
  const std::string target = ToGrpcTarget(address);
  if (!absl::StartsWith(target, "unix:")) return std::nullopt;
  return AdminSocketPath(target);
}

}  // namespace

class Admin::Impl {
 public:
  explicit Impl(absl::string_view address) : given_(address) {
    std::optional<std::string> target = AdminTarget(address);
    if (!target.has_value()) {
      address_ = std::string(address);
      return;
    }
    address_ = *std::move(target);
    // A Unix address: plaintext, which cannot fail.
    stub_ = v1::Admin::NewStub(*CreateDaemonChannel(address_, ChannelSecurity()));
  }

  template <typename Call>
  absl::Status CallDaemon(Call call, absl::Duration timeout = kAdminCallTimeout) {
    if (stub_ == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", address_,
          "' is not a Unix socket: gpumuxd serves gpumux.v1.Admin only on its admin socket, next "
          "to its Unix socket (give --address unix:///PATH)"));
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    // Named as the caller gave it; gRPC's detail names the admin socket.
    return FromGrpcStatus(call(&context), given_);
  }

  const std::string given_;
  std::string address_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

Admin::Admin(absl::string_view address) : impl_(std::make_unique<Impl>(address)) {}
Admin::~Admin() = default;

const std::string& Admin::address() const { return impl_->address_; }

absl::Status Admin::SetTenantLimit(const std::string& tenant, std::optional<uint64_t> limit_bytes,
                                   std::optional<DeviceIndex> device) {
  v1::SetTenantLimitRequest request;
  request.set_tenant(tenant);
  if (device.has_value()) {
    request.set_device(device->value());
  } else {
    request.set_all_devices(true);
  }
  if (limit_bytes.has_value()) {
    request.set_bytes(*limit_bytes);
  } else {
    request.set_unlimited(true);
  }
  v1::SetTenantLimitResponse response;
  return impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->stub_->SetTenantLimit(context, request, &response);
  });
}

absl::StatusOr<std::vector<TenantInfo>> Admin::ListTenants() {
  v1::ListTenantsResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->stub_->ListTenants(context, v1::ListTenantsRequest(), &response);
  }));
  std::vector<TenantInfo> tenants;
  tenants.reserve(response.tenants_size());
  for (const v1::TenantInfo& info : response.tenants()) {
    TenantInfo& tenant = tenants.emplace_back();
    tenant.tenant = info.tenant();
    for (const v1::TenantDeviceUsage& usage : info.devices()) {
      TenantDeviceUsage& device = tenant.devices.emplace_back();
      device.device = usage.device();
      device.limit_bytes = usage.limit_bytes();
      device.reserved_bytes = usage.reserved_bytes();
      device.allocated_bytes = usage.allocated_bytes();
      for (uint64_t id : usage.session_ids()) device.sessions.emplace_back(id);
    }
  }
  return tenants;
}

absl::Status Admin::KillSession(SessionId session, const std::string& reason) {
  v1::KillSessionRequest request;
  request.set_session_id(session.value());
  request.set_reason(reason);
  v1::KillSessionResponse response;
  return impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->stub_->KillSession(context, request, &response);
  });
}

absl::StatusOr<SessionProfile> Admin::ProfileSession(SessionId session, absl::Duration duration,
                                                     uint64_t capacity) {
  const v1::ProfileSessionRequest request = ProfileSessionRequestOf(session, duration, capacity);
  v1::ProfileSessionResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon(
      [&](grpc::ClientContext* context) {
        return impl_->stub_->ProfileSession(context, request, &response);
      },
      duration + kAdminCallTimeout));
  return FromProto(response);
}

absl::StatusOr<ReleasedCache> Admin::EmptyCache(std::optional<DeviceIndex> device) {
  v1::AdminEmptyCacheRequest request;
  if (device.has_value()) {
    request.set_device(device->value());
  } else {
    request.set_all_devices(true);
  }
  v1::AdminEmptyCacheResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->stub_->EmptyCache(context, request, &response);
  }));
  ReleasedCache released;
  released.released_bytes = response.released_bytes();
  released.released_segments = response.released_segments();
  return released;
}

}  // namespace gpumux
