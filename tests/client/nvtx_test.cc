// torch.cuda.nvtx through the client against the real daemon: depths, the
// empty-stack error, message limits and the RAII range.

#include "gpumux/nvtx.h"

#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gtest/gtest.h"
#include "tests/client/client_test_support.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

class NvtxTest : public DaemonClientTest {};

TEST_F(NvtxTest, PushAndPopReportDepths) {
  EXPECT_THAT(nvtx::RangePush(client(), "epoch"), IsOkAndHolds(0));
  EXPECT_THAT(nvtx::RangePush(client(), "step"), IsOkAndHolds(1));
  EXPECT_OK(nvtx::Mark(client(), "checkpoint"));
  EXPECT_THAT(nvtx::RangePush(client(), "forward"), IsOkAndHolds(2));
  EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(2));
  EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(1));
  EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(0));
  EXPECT_THAT(nvtx::RangePop(client()), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(nvtx::RangePush(client(), ""), IsOkAndHolds(0));  // empty messages are fine
}

TEST_F(NvtxTest, SessionsHaveStacksOfTheirOwn) {
  Client* a = &client();
  auto b = ConnectAnother();
  ASSERT_NE(b, nullptr);
  ASSERT_OK(nvtx::RangePush(*a, "a").status());
  EXPECT_THAT(nvtx::RangePop(*b), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(nvtx::RangePush(*b, "b"), IsOkAndHolds(0));
}

// As PyTorch's: a thread's ranges nest on its own stack, whatever other
// threads of the process push and pop meanwhile.
TEST_F(NvtxTest, RangesNestPerThread) {
  ASSERT_THAT(nvtx::RangePush(client(), "main outer"), IsOkAndHolds(0));
  ASSERT_THAT(nvtx::RangePush(client(), "main inner"), IsOkAndHolds(1));
  std::thread other([&] {
    EXPECT_THAT(nvtx::RangePop(client()), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(nvtx::RangePush(client(), "other"), IsOkAndHolds(0));
    EXPECT_THAT(nvtx::RangePush(client(), "other inner"), IsOkAndHolds(1));
    EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(1));
    // left open: the thread's stack is its own
  });
  other.join();
  EXPECT_THAT(nvtx::RangePush(client(), "main deepest"), IsOkAndHolds(2));
  EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(2));
  EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(1));
  EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(0));
  EXPECT_THAT(nvtx::RangePop(client()), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(NvtxTest, MessagesAreLimitedTo4096Bytes) {
  EXPECT_OK(nvtx::Mark(client(), std::string(4096, 'm')));
  EXPECT_THAT(nvtx::Mark(client(), std::string(4097, 'm')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(nvtx::RangePush(client(), std::string(4097, 'r')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(nvtx::RangePop(client()), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(NvtxTest, RangesNestAtMost1024Deep) {
  for (int depth = 0; depth < 1024; ++depth) {
    ASSERT_THAT(nvtx::RangePush(client(), "r"), IsOkAndHolds(depth));
  }
  EXPECT_THAT(nvtx::RangePush(client(), "one too many"),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(nvtx::RangePop(client()), IsOkAndHolds(1023));
  EXPECT_THAT(nvtx::RangePush(client(), "again"), IsOkAndHolds(1023));
}

TEST_F(NvtxTest, RangesPopWhenTheirScopeEnds) {
  {
    nvtx::Range outer(client(), "outer");
    EXPECT_THAT(outer.depth(), IsOkAndHolds(0));
    {
      nvtx::Range inner(client(), "inner");
      EXPECT_THAT(inner.depth(), IsOkAndHolds(1));
    }
    nvtx::Range sibling(client(), "sibling");
    EXPECT_THAT(sibling.depth(), IsOkAndHolds(1));
    nvtx::Range refused(client(), std::string(5000, 'x'));  // not opened: nothing to pop
    EXPECT_THAT(refused.depth(), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(nvtx::RangePop(client()), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(NvtxTest, CallsFailUnavailableOnceTheDaemonIsGone) {
  daemon().Shutdown();
  EXPECT_THAT(nvtx::Mark(client(), "late"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(nvtx::RangePush(client(), "late"), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace gpumux::testing
