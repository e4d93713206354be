#include "client/grpc_status.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;

TEST(FromGrpcStatusTest, OkStaysOk) {
  EXPECT_OK(FromGrpcStatus(grpc::Status::OK, "/run/gpumux/gpumux.sock"));
}

TEST(FromGrpcStatusTest, KeepsTheDaemonsCodeAndMessage) {
  const std::pair<grpc::StatusCode, absl::StatusCode> codes[] = {
      {grpc::StatusCode::INVALID_ARGUMENT, absl::StatusCode::kInvalidArgument},
      {grpc::StatusCode::NOT_FOUND, absl::StatusCode::kNotFound},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StatusCode::kResourceExhausted},
      {grpc::StatusCode::FAILED_PRECONDITION, absl::StatusCode::kFailedPrecondition},
      {grpc::StatusCode::UNAUTHENTICATED, absl::StatusCode::kUnauthenticated},
      {grpc::StatusCode::UNIMPLEMENTED, absl::StatusCode::kUnimplemented},
      {grpc::StatusCode::DEADLINE_EXCEEDED, absl::StatusCode::kDeadlineExceeded},
      {grpc::StatusCode::INTERNAL, absl::StatusCode::kInternal},
  };
  for (const auto& [grpc_code, absl_code] : codes) {
    EXPECT_THAT(FromGrpcStatus(grpc::Status(grpc_code, "the daemon's words"), "/s"),
                StatusIs(absl_code, "the daemon's words"));
  }
}

TEST(FromGrpcStatusTest, UnavailableNamesTheAddress) {
  grpc::Status status(grpc::StatusCode::UNAVAILABLE,
                      "failed to connect to all addresses; last error: UNKNOWN: unix:/x.sock: "
                      "No such file or directory");
  EXPECT_THAT(
      FromGrpcStatus(status, "unix:///x.sock"),
      StatusIs(
          absl::StatusCode::kUnavailable,
          "cannot reach gpumuxd at unix:///x.sock: failed to connect to all "
          "addresses; last error: UNKNOWN: unix:/x.sock: No such file or directory; is gpumuxd "
          "running? Start it (gpumuxd, or systemctl start gpumuxd) or point GPUMUX_ADDRESS (the "
          "CLI: --address) at its socket"));
}

TEST(UnreachableErrorTest, Format) {
  EXPECT_THAT(UnreachableError("host:1234", "gone"),
              StatusIs(absl::StatusCode::kUnavailable, "cannot reach gpumuxd at host:1234: gone"));
  // A daemon's own UNAVAILABLE gets no advice to start one.
  EXPECT_THAT(UnreachableError("host:1234", "gpumuxd is shutting down"),
              StatusIs(absl::StatusCode::kUnavailable,
                       "cannot reach gpumuxd at host:1234: gpumuxd is shutting down"));
}

}  // namespace
}  // namespace gpumux
