// libFuzzer target for gpumux.v1.Profile: profiles started with any
// capacity, finished by any id, and live profiles of any session for up to
// 20 ms (tests/fuzz/profile_inputs.h). The harness finishes the profiles an
// input started at its leak check.

#include "gpumux/v1/profile.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/profile_inputs.h"

namespace gpumux::fuzz {

using v1::Profile;

const FuzzService& TargetService() {
  static const FuzzService service(
      Profile::service_full_name(),
      {
          Unary<Profile>("Start", &Profile::Stub::Start,
                         {"", "capacity: 1", "capacity: 16777216", "capacity: 16777217"}),
          Unary<Profile>("Finish", &Profile::Stub::Finish,
                         {"profile_id: 1", "profile_id: 0", "profile_id: 18446744073709551615"}),
          ProfileSessionMethod<Profile>(),
      });
  return service;
}

}  // namespace gpumux::fuzz
