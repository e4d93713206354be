#include "server/rpc/device_service.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/device_range.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/session_auth.h"

namespace gpumux {

absl::Status DeviceService::CheckDevice(int32_t device) const {
  return CheckDeviceInRange(DeviceIndex(device), backend_->device_count());
}

void DeviceService::FillProperties(DeviceIndex device, v1::DeviceProperties* out) const {
  const DeviceInfo& info = backend_->device_info(device);
  out->set_index(device.value());
  out->set_name(info.name);
  out->set_backend(std::string(backend_->name()));
  out->set_total_memory(info.total_memory);
  const absl::StatusOr<uint64_t> free_memory = backend_->FreeMemory(device);
  out->set_free_memory(free_memory.ok() ? *free_memory : 0);
  out->set_major(info.major);
  out->set_minor(info.minor);
  out->set_multi_processor_count(info.multi_processor_count);
  out->set_pci_bus_id(info.pci_bus_id);
  for (const std::string& arch : info.arch_list) out->add_arch_list(arch);
  out->set_gencode_flags(info.gencode_flags);
  out->set_driver_version(info.driver_version);
  out->set_runtime_version(info.runtime_version);
  CollectiveEngine* engine = backend_->collectives();
  out->set_collectives(engine != nullptr ? engine->description() : "copies");
  // A device that cannot say what is free is not healthy: the 0 above is
  // explained here, not passed off as a full device.
  absl::Status health = backend_->DeviceHealth(device);
  if (health.ok() && !free_memory.ok()) {
    health = absl::Status(free_memory.status().code(),
                          absl::StrCat("free memory unknown: ", free_memory.status().message()));
  }
  out->set_healthy(health.ok());
  out->set_health(health.ok() ? "ok" : std::string(health.message()));
}

grpc::ServerUnaryReactor* DeviceService::GetDeviceCount(
    grpc::CallbackServerContext* context, const v1::GetDeviceCountRequest* /*request*/,
    v1::GetDeviceCountResponse* response) {
  response->set_count(backend_->device_count());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DeviceService::ListDevices(grpc::CallbackServerContext* context,
                                                     const v1::ListDevicesRequest* /*request*/,
                                                     v1::ListDevicesResponse* response) {
  for (int d = 0; d < backend_->device_count(); ++d)
    FillProperties(DeviceIndex(d), response->add_devices());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DeviceService::GetDeviceProperties(
    grpc::CallbackServerContext* context, const v1::GetDevicePropertiesRequest* request,
    v1::DeviceProperties* response) {
  absl::Status status = CheckDevice(request->device());
  if (status.ok()) FillProperties(DeviceIndex(request->device()), response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* DeviceService::Synchronize(grpc::CallbackServerContext* context,
                                                     const v1::SynchronizeRequest* request,
                                                     v1::SynchronizeResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = CheckDevice(request->device());
  if (!status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  // Without a session (an observer's call) nothing is reported but the wait.
  const absl::StatusOr<SessionId> session = AuthenticateCall(*context, *sessions_);
  absl::Status started = executor_->Run(
      [backend = backend_, streams = streams_, reactor, device = DeviceIndex(request->device()),
       session = session.ok() ? std::optional<SessionId>(*session) : std::nullopt] {
        absl::Status synchronized = backend->Synchronize(device);
        if (synchronized.ok() && session.has_value())
          synchronized = streams->TakeAsyncError(*session, device);
        reactor->Finish(ToGrpcStatus(synchronized));
      });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));  // the task was dropped unrun
  return reactor;
}

}  // namespace gpumux
