// Nvtx service end to end over a real Unix socket: range depths as
// torch.cuda.nvtx reports them, per-session stacks and the message limit.

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"
#include "tests/rpc/grpc_status_matchers.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

grpc::Status Push(RawSession& session, const std::string& message, int* depth = nullptr) {
  v1::NvtxMessage request;
  request.set_message(message);
  v1::NvtxDepth response;
  grpc::Status status = session.nvtx().RangePush(session.Context().get(), request, &response);
  if (depth != nullptr) *depth = response.depth();
  return status;
}

grpc::Status Pop(RawSession& session, int* depth = nullptr) {
  v1::NvtxDepth response;
  grpc::Status status =
      session.nvtx().RangePop(session.Context().get(), v1::NvtxRangePopRequest(), &response);
  if (depth != nullptr) *depth = response.depth();
  return status;
}

grpc::Status Mark(RawSession& session, const std::string& message) {
  v1::NvtxMessage request;
  request.set_message(message);
  v1::NvtxMarkResponse response;
  return session.nvtx().Mark(session.Context().get(), request, &response);
}

using NvtxServiceTest = DaemonTest;

TEST_F(NvtxServiceTest, PushAndPopReportDepths) {
  RawSession session(channel_, "nvtx");
  int depth = -1;
  ASSERT_THAT(Push(session, "outer", &depth), GrpcIsOk());
  EXPECT_EQ(depth, 0);
  ASSERT_THAT(Push(session, "inner", &depth), GrpcIsOk());
  EXPECT_EQ(depth, 1);
  ASSERT_THAT(Mark(session, "inside"), GrpcIsOk());
  ASSERT_THAT(Pop(session, &depth), GrpcIsOk());
  EXPECT_EQ(depth, 1);
  ASSERT_THAT(Pop(session, &depth), GrpcIsOk());
  EXPECT_EQ(depth, 0);
  EXPECT_THAT(Pop(session),
              GrpcStatusIs(grpc::StatusCode::FAILED_PRECONDITION, HasSubstr("range_push")));
  ASSERT_THAT(Push(session, "again", &depth), GrpcIsOk());
  EXPECT_EQ(depth, 0);
}

TEST_F(NvtxServiceTest, SessionsKeepTheirOwnStacks) {
  RawSession a(channel_, "a");
  RawSession b(channel_, "b");
  ASSERT_THAT(Push(a, "a0"), GrpcIsOk());
  ASSERT_THAT(Push(a, "a1"), GrpcIsOk());
  EXPECT_THAT(Pop(b), GrpcStatusIs(grpc::StatusCode::FAILED_PRECONDITION));
  int depth = -1;
  ASSERT_THAT(Push(b, "b0", &depth), GrpcIsOk());
  EXPECT_EQ(depth, 0);
  ASSERT_THAT(Pop(a, &depth), GrpcIsOk());
  EXPECT_EQ(depth, 1);
}

TEST_F(NvtxServiceTest, MessagesAreAtMost4096Bytes) {
  RawSession session(channel_, "long");
  EXPECT_THAT(Mark(session, std::string(4096, 'm')), GrpcIsOk());
  EXPECT_THAT(Mark(session, std::string(4097, 'm')),
              GrpcStatusIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("4097")));
  EXPECT_THAT(Push(session, std::string(4097, 'p')),
              GrpcStatusIs(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(Pop(session), GrpcStatusIs(grpc::StatusCode::FAILED_PRECONDITION))
      << "a refused push opened a range";
  EXPECT_THAT(Mark(session, ""), GrpcIsOk());
}

TEST_F(NvtxServiceTest, RangesNestAtMost1024Deep) {
  RawSession session(channel_, "deep");
  for (int i = 0; i < 1024; ++i) ASSERT_THAT(Push(session, "r"), GrpcIsOk()) << i;
  EXPECT_THAT(Push(session, "r"), GrpcStatusIs(grpc::StatusCode::RESOURCE_EXHAUSTED));
  int depth = -1;
  ASSERT_THAT(Pop(session, &depth), GrpcIsOk());
  EXPECT_EQ(depth, 1023);
}

TEST_F(NvtxServiceTest, CallsNeedASession) {
  auto nvtx = v1::Nvtx::NewStub(channel_);
  grpc::ClientContext context;
  v1::NvtxMessage request;
  v1::NvtxMarkResponse response;
  EXPECT_THAT(nvtx->Mark(&context, request, &response),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED));
}

}  // namespace
}  // namespace gpumux::testing
