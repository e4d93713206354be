#pragma once

// gpumux.v1.Device: device count, properties and synchronize, straight from
// the backend. Needs no session (it is part of the TCP observe surface).

#include "gpumux/v1/device.grpc.pb.h"
#include "server/backend/device_backend.h"

namespace gpumux {

class DeviceService final : public v1::Device::CallbackService {
 public:
  // `backend` must outlive the service.
  explicit DeviceService(DeviceBackend* backend) : backend_(backend) {}

  grpc::ServerUnaryReactor* GetDeviceCount(grpc::CallbackServerContext* context,
                                           const v1::GetDeviceCountRequest* request,
                                           v1::GetDeviceCountResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* context, const v1::ListDevicesRequest* request,
                                        v1::ListDevicesResponse* response) override;
  grpc::ServerUnaryReactor* GetDeviceProperties(grpc::CallbackServerContext* context,
                                                const v1::GetDevicePropertiesRequest* request,
                                                v1::DeviceProperties* response) override;
  grpc::ServerUnaryReactor* Synchronize(grpc::CallbackServerContext* context, const v1::SynchronizeRequest* request,
                                        v1::SynchronizeResponse* response) override;

 private:
  absl::Status CheckDevice(int32_t device) const;
  void FillProperties(DeviceIndex device, v1::DeviceProperties* out) const;

  DeviceBackend* backend_;
};

}  // namespace gpumux
