#pragma once

// GrpcIsOk() and GrpcStatusIs(code[, message_matcher]) for grpc::Status, the
// wire-level twins of tests/status_matchers.h's IsOk() and StatusIs().

#include <string>

#include "gmock/gmock.h"
#include "grpcpp/support/status.h"

namespace gpumux::testing {

// The codes the wire-level tests expect most, by short name.
inline constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
inline constexpr auto kNotFound = grpc::StatusCode::NOT_FOUND;
inline constexpr auto kOutOfRange = grpc::StatusCode::OUT_OF_RANGE;
inline constexpr auto kPrecondition = grpc::StatusCode::FAILED_PRECONDITION;

MATCHER(GrpcIsOk, "is OK") {
  if (!arg.ok())
    *result_listener << "status is " << arg.error_code() << ": " << arg.error_message();
  return arg.ok();
}

MATCHER_P(GrpcStatusIs, code, "has code " + ::testing::PrintToString(static_cast<int>(code))) {
  *result_listener << "status is " << arg.error_code() << ": " << arg.error_message();
  return arg.error_code() == code;
}

MATCHER_P2(GrpcStatusIs, code, message_matcher,
           "has code " + ::testing::PrintToString(static_cast<int>(code))) {
  *result_listener << "status is " << arg.error_code() << ": " << arg.error_message();
  return arg.error_code() == code &&
         ::testing::ExplainMatchResult(message_matcher, arg.error_message(), result_listener);
}

}  // namespace gpumux::testing
