// libFuzzer target for gpumux.v1.Nvtx: marks, range pushes and pops with any
// message, up to and past the depth and record bounds.

#include "gpumux/v1/nvtx.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Nvtx;

const FuzzService& TargetService() {
  static const FuzzService service(
      Nvtx::service_full_name(),
      {
          Unary<Nvtx>("Mark", &Nvtx::Stub::Mark, {"message: 'step 1'", ""}),
          Unary<Nvtx>("RangePush", &Nvtx::Stub::RangePush, {"message: 'forward'"}),
          Unary<Nvtx>("RangePop", &Nvtx::Stub::RangePop, {""}),
      });
  return service;
}

}  // namespace gpumux::fuzz
