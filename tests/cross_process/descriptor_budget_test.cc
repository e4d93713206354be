// gpumuxd's descriptors against a client that has it create memory files:
// with RLIMIT_NOFILE at 3,000, 20,000 interprocess events used to take them
// all, and gRPC's listener then stopped accepting for good. Memory files get
// a budget below the limit, the refusal says so, and the sockets serve on.

#include <sys/resource.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

grpc::Status CreateInterprocessEvent(RawSession& session, uint64_t* event) {
  v1::CreateEventRequest request;
  request.set_device(0);
  request.set_interprocess(true);
  v1::CreateEventResponse response;
  grpc::Status status = session.event().Create(session.Context().get(), request, &response);
  *event = response.event();
  return status;
}

TEST(DescriptorBudgetTest, MemoryFilesStopShortOfTheListenersDescriptors) {
  auto daemon = std::make_unique<DaemonProcess>(std::vector<std::string>{"--host-devices=1"},
                                                /*descriptor_limit=*/3000);
  auto greedy = std::make_unique<RawSession>(daemon->channel(), "greedy");
  grpc::Status status;
  int created = 0;
  for (uint64_t event = 0; created < 5000; ++created) {
    status = CreateInterprocessEvent(*greedy, &event);
    if (!status.ok()) break;
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << created;
  EXPECT_THAT(status.error_message(),
              HasSubstr("the most this process may hold (gpumuxd's descriptor limit 3000 less "
                        "1500 kept for connections)"));
  EXPECT_GT(created, 1000);
  EXPECT_LE(created, 1500);
  // New connections and sessions are served, many at once.
  std::vector<std::unique_ptr<RawSession>> others;
  for (int i = 0; i < 100; ++i) {
    auto channel = grpc::CreateChannel(daemon->address(), grpc::InsecureChannelCredentials());
    others.push_back(std::make_unique<RawSession>(channel, "other"));
    ASSERT_TRUE(others.back()->Ping().ok()) << i;
  }
  others.clear();
  // Once the greedy session is gone, its files are back.
  ASSERT_TRUE(greedy->Close().ok());
  greedy.reset();
  RawSession later(daemon->channel(), "later");
  uint64_t event = 0;
  status = CreateInterprocessEvent(later, &event);
  for (int i = 0; i < 200 && !status.ok(); ++i) {  // the session's end is reclaimed in its time
    usleep(10000);
    status = CreateInterprocessEvent(later, &event);
  }
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(daemon->Stop(), 0);
}

}  // namespace
}  // namespace gpumux::testing
