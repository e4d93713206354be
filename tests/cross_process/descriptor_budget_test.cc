// gpumuxd's descriptors against a client that has it create memory files:
// with RLIMIT_NOFILE at 3,000, 20,000 interprocess events used to take them
// all, and gRPC's listener then stopped accepting for good. Memory files get
// a budget below the limit, the refusal says so, and the sockets serve on.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/support/free_port.h"
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
  // One tenant holds a quarter of the 1,500 memory files in interprocess
  // events; five greedy tenants together reach the daemon's budget.
  std::vector<std::unique_ptr<RawSession>> greedy;
  std::vector<grpc::Status> refusals;
  int created = 0;
  for (int t = 0; t < 5; ++t) {
    greedy.push_back(
        std::make_unique<RawSession>(daemon->channel(), "greedy", absl::StrCat("greedy-", t)));
    grpc::Status status;
    for (uint64_t event = 0; created < 5000; ++created) {
      status = CreateInterprocessEvent(*greedy.back(), &event);
      if (!status.ok()) break;
    }
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << created;
    refusals.push_back(status);
  }
  EXPECT_THAT(refusals[0].error_message(),
              HasSubstr("tenant 'greedy-0' holds 375 interprocess events, a tenant's share (a "
                        "quarter of the daemon's 1500)"));
  EXPECT_THAT(refusals[4].error_message(),
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
  // Once the greedy sessions are gone, their files are back.
  for (auto& session : greedy) ASSERT_TRUE(session->Close().ok());
  greedy.clear();
  RawSession later(daemon->channel(), "later");
  uint64_t event = 0;
  grpc::Status status = CreateInterprocessEvent(later, &event);
  for (int i = 0; i < 200 && !status.ok(); ++i) {  // the session's end is reclaimed in its time
    usleep(10000);
    status = CreateInterprocessEvent(later, &event);
  }
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(daemon->Stop(), 0);
}

// GET `path` from 127.0.0.1:`port`: the status line's code and the body.
std::pair<int, std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) answer.append(buffer, n);
    }
  }
  close(fd);
  const size_t space = answer.find(' ');
  const size_t body = answer.find("\r\n\r\n");
  if (space == std::string::npos || body == std::string::npos) return {0, answer};
  return {std::atoi(answer.c_str() + space + 1), answer.substr(body + 4)};
}

// gRPC's listener stops accepting for good once an accept failed for lack
// of descriptors: plain connections that fill the descriptors a daemon keeps
// for connections leave its Unix socket deaf after they closed. /healthz and
// /readyz then say so, so that an orchestrator restarts the daemon.
TEST(DescriptorBudgetTest, ADeafListenerFailsTheHealthEndpoints) {
  const int port = FreePort();
  DaemonProcess daemon({"--host-devices=1", absl::StrCat("--metrics-listen=127.0.0.1:", port)},
                       /*descriptor_limit=*/300);
  EXPECT_EQ(HttpGet(port, "/healthz"), std::make_pair(200, std::string("ok\n")));
  std::vector<int> flood;
  for (int i = 0; i < 600; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", daemon.socket_path().c_str());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << i;
    flood.push_back(fd);
  }
  absl::SleepFor(absl::Seconds(1));
  for (int fd : flood) close(fd);
  std::pair<int, std::string> health;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    health = HttpGet(port, "/healthz");
    if (health.first != 200) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(health.first, 503) << health.second;
  EXPECT_THAT(health.second, HasSubstr("accepts no connections"));
  const std::pair<int, std::string> ready = HttpGet(port, "/readyz");
  EXPECT_EQ(ready.first, 503);
  EXPECT_THAT(ready.second, HasSubstr("accepts no connections"));
}

}  // namespace
}  // namespace gpumux::testing
