// libFuzzer target for gpumux.v1.Stream: priority ranges, creating and
// destroying streams, query, synchronize and the waits, against the
// fixture's stream (device 0, id 1) and events (1 timing, 2 interprocess).

#include "gpumux/v1/stream.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Stream;

const FuzzService& TargetService() {
  static const FuzzService service(
      Stream::service_full_name(),
      {
          Unary<Stream>("GetPriorityRange", &Stream::Stub::GetPriorityRange, {"device: 1"}),
          Unary<Stream>("Create", &Stream::Stub::Create,
                        {"device: 0 priority: -1", "device: 1 priority: 5"}),
          Unary<Stream>("Destroy", &Stream::Stub::Destroy,
                        {"stream { device: 0 stream: 99 }", "stream { device: 1 stream: 0 }"}),
          Unary<Stream>("Query", &Stream::Stub::Query,
                        {"stream { device: 0 stream: 1 }", "stream { device: 1 }"}),
          Unary<Stream>("Synchronize", &Stream::Stub::Synchronize,
                        {"stream { device: 0 stream: 1 }", "stream { device: 1 }"}),
          Unary<Stream>(
              "WaitEvent", &Stream::Stub::WaitEvent,
              {"stream { device: 0 stream: 1 } event: 1", "stream { device: 1 } event: 2"}),
          Unary<Stream>("WaitStream", &Stream::Stub::WaitStream,
                        {"stream { device: 0 stream: 1 } other { device: 0 }",
                         "stream { device: 1 } other { device: 0 stream: 1 }"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
