#pragma once

// Conversions between gpumux.v1.Comm messages and CommWork's types, for the
// Comm service.

#include <vector>

#include "absl/status/statusor.h"
#include "gpumux/v1/comm.pb.h"
#include "server/core/comm_work.h"

namespace gpumux {

// INVALID_ARGUMENT for a dtype gpumux does not take.
absl::StatusOr<CommTensor> FromProto(const v1::Tensor& tensor);
absl::StatusOr<std::vector<CommTensor>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors);
// INVALID_ARGUMENT for more than kMaxCommDevicesPerRequest streams.
absl::StatusOr<CommOptions> FromProto(const v1::CommOptions& options);
// INVALID_ARGUMENT for REDUCE_OP_UNSPECIFIED or an unknown op.
absl::StatusOr<ReduceOp> FromProto(v1::ReduceOp op);

// The results and completion event of `done` into `response`.
void ToProto(const CommDone& done, v1::CommResponse* response);

}  // namespace gpumux
