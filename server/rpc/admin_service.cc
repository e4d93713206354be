#include "server/rpc/admin_service.h"

#include "absl/strings/str_cat.h"
#include "server/core/empty_every_cache.h"
#include "server/rpc/admin_proto.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/profile_service.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::SetTenantLimit(grpc::CallbackServerContext* context,
                                                       const v1::SetTenantLimitRequest* request,
                                                       v1::SetTenantLimitResponse* /*response*/) {
  absl::StatusOr<TenantLimitChange> change = FromProto(*request);
  if (!change.ok()) return FinishWith(context, change.status());
  absl::Status status =
      memory_->SetTenantLimit(change->tenant, change->device, change->limit_bytes);
  if (status.ok()) {
    // Policy changes are the operator's to audit.
    spdlog::info("tenant '{}': memory limit on {} set to {}", change->tenant,
                 change->device.has_value() ? absl::StrCat("GPU ", change->device->value())
                                            : std::string("every device"),
                 change->limit_bytes == 0 ? std::string("unlimited")
                                          : absl::StrCat(change->limit_bytes, " bytes"));
  }
  return FinishWith(context, status);
}

grpc::ServerUnaryReactor* AdminService::ListTenants(grpc::CallbackServerContext* context,
                                                    const v1::ListTenantsRequest* /*request*/,
                                                    v1::ListTenantsResponse* response) {
  ToProto(memory_->ListTenants(), response);
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::KillSession(grpc::CallbackServerContext* context,
                                                    const v1::KillSessionRequest* request,
                                                    v1::KillSessionResponse* /*response*/) {
  absl::StatusOr<SessionKill> kill = FromProto(*request);
  if (!kill.ok()) return FinishWith(context, kill.status());
  // Kill logs the session's end with the reason and what was reclaimed.
  return FinishWith(context, lifecycle_->Kill(kill->session, kill->reason));
}

grpc::ServerUnaryReactor* AdminService::ProfileSession(grpc::CallbackServerContext* context,
                                                       const v1::ProfileSessionRequest* request,
                                                       v1::ProfileSessionResponse* response) {
  // The window lasts its duration: not on a gRPC thread.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started = executor_->Run([this, reactor, request, response] {
    reactor->Finish(ToGrpcStatus(FillLiveProfile(*profiler_, *sessions_, *request, response)));
  });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));  // the task was dropped unrun
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::EmptyCache(grpc::CallbackServerContext* context,
                                                   const v1::AdminEmptyCacheRequest* request,
                                                   v1::AdminEmptyCacheResponse* response) {
  std::optional<DeviceIndex> device;
  switch (request->target_case()) {
    case v1::AdminEmptyCacheRequest::kDevice:
      device = DeviceIndex(request->device());
      break;
    case v1::AdminEmptyCacheRequest::kAllDevices:
      if (!request->all_devices()) {
        return FinishWith(
            context, absl::InvalidArgumentError("all_devices must be true when set; name a device "
                                                "otherwise"));
      }
      break;
    case v1::AdminEmptyCacheRequest::TARGET_NOT_SET:
      return FinishWith(context, absl::InvalidArgumentError("name a device, or all_devices: true"));
  }
  // Waits for local clients' answers: not on a gRPC thread.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started = executor_->Run([this, reactor, device, response] {
    absl::StatusOr<EmptyCacheResult> released =
        EmptyEveryCache(*memory_, *queries_, device, absl::Now() + reply_timeout_);
    if (released.ok()) {
      response->set_released_bytes(released->released_bytes);
      response->set_released_segments(released->released_segments);
      spdlog::info(
          "an operator emptied every session's cache on {}: {} bytes in {} segments",
          device.has_value() ? absl::StrCat("GPU ", device->value()) : std::string("every device"),
          released->released_bytes, released->released_segments);
    }
    reactor->Finish(ToGrpcStatus(released.status()));
  });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));  // the task was dropped unrun
  return reactor;
}

grpc::ServerUnaryReactor* AdminDenyService::Deny(grpc::CallbackServerContext* context) const {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, reason_));
  return reactor;
}

grpc::ServerUnaryReactor* AdminDenyService::SetTenantLimit(
    grpc::CallbackServerContext* context, const v1::SetTenantLimitRequest* /*request*/,
    v1::SetTenantLimitResponse* /*response*/) {
  return Deny(context);
}

grpc::ServerUnaryReactor* AdminDenyService::ListTenants(grpc::CallbackServerContext* context,
                                                        const v1::ListTenantsRequest* /*request*/,
                                                        v1::ListTenantsResponse* /*response*/) {
  return Deny(context);
}

grpc::ServerUnaryReactor* AdminDenyService::KillSession(grpc::CallbackServerContext* context,
                                                        const v1::KillSessionRequest* /*request*/,
                                                        v1::KillSessionResponse* /*response*/) {
  return Deny(context);
}

grpc::ServerUnaryReactor* AdminDenyService::ProfileSession(
    grpc::CallbackServerContext* context, const v1::ProfileSessionRequest* /*request*/,
    v1::ProfileSessionResponse* /*response*/) {
  return Deny(context);
}

grpc::ServerUnaryReactor* AdminDenyService::EmptyCache(
    grpc::CallbackServerContext* context, const v1::AdminEmptyCacheRequest* /*request*/,
    v1::AdminEmptyCacheResponse* /*response*/) {
  return Deny(context);
}

}  // namespace gpumux
