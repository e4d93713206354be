#pragma once

// Conversions between gpumux.v1.Random messages and the core's RNG types,
// for the Random service.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/rng_fill.h"
#include "gpumux/v1/random.pb.h"

namespace gpumux {

// INVALID_ARGUMENT for a dtype gpumux does not take (the RNG's: float32,
// float64, float16, bfloat16, int32, int64, uint8).
absl::StatusOr<RngDtype> DtypeFromProto(v1::Dtype dtype);
v1::Dtype DtypeToProto(RngDtype dtype);

// INVALID_ARGUMENT for a dtype the fills do not take or no distribution set.
absl::StatusOr<RngRequest> FromProto(const v1::GenerateRequest& request);

// The one state of a set_rng_state for one device (the message carries a
// list for both forms); INVALID_ARGUMENT for any other count.
absl::StatusOr<absl::string_view> SingleState(const v1::SetRngStateRequest& request);

}  // namespace gpumux
