// libFuzzer target for gpumux.v1.Copy: the staging buffer, device to device
// (also across devices), host to device and back (inline or staged) and
// memset, with any options, against the fixture's allocations (1 and 3 on
// device 0, 2 on device 1, 1 MiB each) and stream (device 0, id 1).

#include "gpumux/v1/copy.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Copy;

const FuzzService& TargetService() {
  static const FuzzService service(
      Copy::service_full_name(),
      {
          Unary<Copy>("GetStagingBuffer", &Copy::Stub::GetStagingBuffer, {"", "min_size: 4194304"}),
          Unary<Copy>("DeviceToDevice", &Copy::Stub::DeviceToDevice,
                      {"dst { allocation_id: 1 } src { allocation_id: 3 offset: 16 } size: 4096",
                       "dst { allocation_id: 2 offset: 8 } src { allocation_id: 1 } size: 64 "
                       "options { stream: 0 wait: true completion_event: true }"}),
          Unary<Copy>("HostToDevice", &Copy::Stub::HostToDevice,
                      {"dst { allocation_id: 1 offset: 3 } data: 'bytes' options { stream: 1 }",
                       "dst { allocation_id: 2 } staging { offset: 0 size: 65536 } options { wait: "
                       "true }"}),
          Unary<Copy>("DeviceToHost", &Copy::Stub::DeviceToHost,
                      {"src { allocation_id: 1 } inline_size: 128",
                       "src { allocation_id: 3 offset: 4 } staging { offset: 512 size: 1024 } "
                       "options { completion_event: true }"}),
          Unary<Copy>("Memset", &Copy::Stub::Memset,
                      {"dst { allocation_id: 1 offset: 1 } size: 100 value: 255 options { stream: "
                       "1 wait: true }",
                       "dst { allocation_id: 2 } size: 1048576 value: 7"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
