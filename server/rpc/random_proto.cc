#include "server/rpc/random_proto.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gpumux {

absl::StatusOr<RngDtype> DtypeFromProto(v1::Dtype dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return RngDtype::kF32;
    case v1::DTYPE_FLOAT64:
      return RngDtype::kF64;
    case v1::DTYPE_FLOAT16:
      return RngDtype::kF16;
    case v1::DTYPE_BFLOAT16:
      return RngDtype::kBF16;
    case v1::DTYPE_INT32:
      return RngDtype::kI32;
    case v1::DTYPE_INT64:
      return RngDtype::kI64;
    case v1::DTYPE_UINT8:
      return RngDtype::kU8;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", static_cast<int>(dtype),
                       " is not one of float32, float64, float16, bfloat16, int32, int64, uint8"));
  }
}

v1::Dtype DtypeToProto(RngDtype dtype) {
  switch (dtype) {
    case RngDtype::kF32:
      return v1::DTYPE_FLOAT32;
    case RngDtype::kF64:
      return v1::DTYPE_FLOAT64;
    case RngDtype::kF16:
      return v1::DTYPE_FLOAT16;
    case RngDtype::kBF16:
      return v1::DTYPE_BFLOAT16;
    case RngDtype::kI32:
      return v1::DTYPE_INT32;
    case RngDtype::kI64:
      return v1::DTYPE_INT64;
    case RngDtype::kU8:
      return v1::DTYPE_UINT8;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<RngRequest> FromProto(const v1::GenerateRequest& request) {
  RngRequest out;
  GPUMUX_ASSIGN_OR_RETURN(out.dtype, DtypeFromProto(request.dtype()));
  out.elements = request.elements();
  switch (request.distribution_case()) {
    case v1::GenerateRequest::kUniform:
      out.kind = RngKind::kUniform;
      out.a = request.uniform().low();
      out.b = request.uniform().high();
      break;
    case v1::GenerateRequest::kNormal:
      out.kind = RngKind::kNormal;
      out.a = request.normal().mean();
      out.b = request.normal().std();
      break;
    case v1::GenerateRequest::kBits:
      out.kind = RngKind::kBits;
      break;
    case v1::GenerateRequest::DISTRIBUTION_NOT_SET:
      return absl::InvalidArgumentError("set the distribution: uniform, normal or bits");
  }
  return out;
}

absl::StatusOr<absl::string_view> SingleState(const v1::SetRngStateRequest& request) {
  if (request.states_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_rng_state takes one state, not ", request.states_size()));
  }
  return absl::string_view(request.states(0));
}

}  // namespace gpumux
