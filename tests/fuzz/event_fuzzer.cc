// libFuzzer target for gpumux.v1.Event: creating, recording, querying,
// synchronizing, timing and destroying events, and interprocess handles,
// against the fixture's events (1 timing, 2 interprocess, device 0) and
// stream (device 0, id 1).

#include "absl/strings/str_cat.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Event;

const FuzzService& TargetService() {
  static const FuzzService service(
      Event::service_full_name(),
      {
          Unary<Event>(
              "Create", &Event::Stub::Create,
              {"device: 0 enable_timing: true", "device: 1 interprocess: true blocking: true"}),
          Unary<Event>("Destroy", &Event::Stub::Destroy, {"event: 99"}),
          Unary<Event>(
              "Record", &Event::Stub::Record,
              {"event: 1 stream { device: 0 stream: 1 }", "event: 2 stream { device: 0 }"}),
          Unary<Event>("Query", &Event::Stub::Query, {"event: 1"}),
          Unary<Event>("Synchronize", &Event::Stub::Synchronize, {"event: 2"}),
          Unary<Event>("ElapsedTime", &Event::Stub::ElapsedTime,
                       {"start: 1 end: 1", "start: 1 end: 2"}),
          Unary<Event>("GetIpcHandle", &Event::Stub::GetIpcHandle, {"event: 2", "event: 1"}),
          Unary<Event>(
              "OpenIpcHandle", &Event::Stub::OpenIpcHandle,
              {absl::StrCat("device: 0 handle: ", kSeedEventHandle), "device: 1 handle: 'short'"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
