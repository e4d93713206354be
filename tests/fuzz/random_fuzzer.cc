// libFuzzer target for gpumux.v1.Random: seeds, generator states of any
// bytes, and fills of every dtype and distribution into the fixture's
// allocations (1 on device 0, 2 on device 1, 1 MiB each).

#include "gpumux/v1/random.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Random;

const FuzzService& TargetService() {
  static const FuzzService service(
      Random::service_full_name(),
      {
          Unary<Random>("ManualSeed", &Random::Stub::ManualSeed,
                        {"device: 0 seed: 42", "all_devices: true seed: 7"}),
          Unary<Random>("Seed", &Random::Stub::Seed, {"device: 1", "all_devices: true"}),
          Unary<Random>("InitialSeed", &Random::Stub::InitialSeed, {"device: 0"}),
          Unary<Random>("GetState", &Random::Stub::GetState, {"device: 1", "all_devices: true"}),
          Unary<Random>("SetState", &Random::Stub::SetState,
                        {"device: 0 states: '\\x2a\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0'",
                         "all_devices: true states: 'a' states: 'b'"}),
          Unary<Random>(
              "Generate", &Random::Stub::Generate,
              {"dst { allocation_id: 1 } dtype: DTYPE_FLOAT32 elements: 1024 uniform { low: 0 "
               "high: 1 }",
               "dst { allocation_id: 2 offset: 2 } dtype: DTYPE_BFLOAT16 elements: 10 "
               "normal { mean: 0 std: 2 } options { wait: true completion_event: true }",
               "dst { allocation_id: 1 offset: 8 } dtype: DTYPE_INT64 elements: 3 bits { } "
               "options { stream: 1 }",
               "dst { allocation_id: 1 } dtype: DTYPE_UINT8 elements: 5 uniform { low: 3 high: 200 "
               "}"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
