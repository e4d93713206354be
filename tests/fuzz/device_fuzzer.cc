// libFuzzer target for gpumux.v1.Device: device count, list, properties and
// synchronize, with any device index.

#include "gpumux/v1/device.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Device;

const FuzzService& TargetService() {
  static const FuzzService service(
      Device::service_full_name(),
      {
          Unary<Device>("GetDeviceCount", &Device::Stub::GetDeviceCount, {""}),
          Unary<Device>("ListDevices", &Device::Stub::ListDevices, {""}),
          Unary<Device>("GetDeviceProperties", &Device::Stub::GetDeviceProperties,
                        {"device: 1", "device: -1"}),
          Unary<Device>("Synchronize", &Device::Stub::Synchronize, {"device: 0", "device: 2"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
