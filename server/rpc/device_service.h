#pragma once

// gpumux.v1.Device: device count, properties and synchronize, straight from
// the backend. Needs no session (it is part of the TCP observe surface).
// Synchronize waits on the blocking executor, never on a gRPC thread; a
// call that names a session then also reports the session's asynchronous
// error on the device (StreamManager::TakeAsyncError), as
// torch.cuda.synchronize() raises an earlier asynchronous launch's failure.

#include "gpumux/v1/device.grpc.pb.h"
#include "server/backend/device_backend.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

class DeviceService final : public v1::Device::CallbackService {
 public:
  // All must outlive the service.
  DeviceService(DeviceBackend* backend, BlockingExecutor* executor, const SessionRegistry* sessions,
                StreamManager* streams)
      : backend_(backend), executor_(executor), sessions_(sessions), streams_(streams) {}

  grpc::ServerUnaryReactor* GetDeviceCount(grpc::CallbackServerContext* context,
                                           const v1::GetDeviceCountRequest* request,
                                           v1::GetDeviceCountResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* context,
                                        const v1::ListDevicesRequest* request,
                                        v1::ListDevicesResponse* response) override;
  grpc::ServerUnaryReactor* GetDeviceProperties(grpc::CallbackServerContext* context,
                                                const v1::GetDevicePropertiesRequest* request,
                                                v1::DeviceProperties* response) override;
  grpc::ServerUnaryReactor* Synchronize(grpc::CallbackServerContext* context,
                                        const v1::SynchronizeRequest* request,
                                        v1::SynchronizeResponse* response) override;

 private:
  absl::Status CheckDevice(int32_t device) const;
  void FillProperties(DeviceIndex device, v1::DeviceProperties* out) const;

  DeviceBackend* backend_;
  BlockingExecutor* executor_;
  const SessionRegistry* sessions_;
  StreamManager* streams_;
};

}  // namespace gpumux
