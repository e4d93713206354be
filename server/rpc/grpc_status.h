#pragma once

// The one place absl::Status becomes grpc::Status: same code, same message.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace gpumux {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gpumux
