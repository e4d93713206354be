// Observer against the real daemon in this process: the read-only view an
// operator's tools use, without a session of its own.

#include "gpumux/observer.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux {
namespace {

using ::gpumux::testing::DaemonClientTest;
using ::gpumux::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// The daemon alone: the observer opens no session, the tests their own.
class ObserverTest : public DaemonClientTest {
 protected:
  ObserverTest() : DaemonClientTest({.connect = false}) {}
  void SetUp() override {
    DaemonClientTest::SetUp();
    observer_ = std::make_unique<Observer>(daemon().address());
  }
  Observer& observer() { return *observer_; }

 private:
  std::unique_ptr<Observer> observer_;
};

TEST_F(ObserverTest, ListsDevicesAndOpensNoSession) {
  absl::StatusOr<std::vector<DeviceProperties>> devices = observer().ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_THAT(*devices, SizeIs(2));
  EXPECT_EQ((*devices)[1].index, 1);
  EXPECT_EQ((*devices)[0].backend, "host");
  EXPECT_EQ((*devices)[0].total_memory, uint64_t{64} << 20);
  absl::StatusOr<std::vector<SessionInfo>> sessions = observer().ListSessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  EXPECT_THAT(*sessions, IsEmpty());
}

TEST_F(ObserverTest, SeesASessionsBooksAndTheDevicesStats) {
  ClientOptions options;
  options.client_name = "observed";
  options.tenant = "team-a";
  options.labels = {{"pod", "p-1"}};
  std::unique_ptr<Client> client = ConnectAnother(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client, 4096, DeviceIndex(1));
  ASSERT_TRUE(buffer.ok()) << buffer.status();

  absl::StatusOr<std::vector<SessionInfo>> sessions = observer().ListSessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_THAT(*sessions, SizeIs(1));
  const SessionInfo& session = (*sessions)[0];
  EXPECT_EQ(session.session_id, client->session_id());
  EXPECT_EQ(session.client_name, "observed");
  EXPECT_EQ(session.tenant, "team-a");
  EXPECT_EQ(session.labels.at("pod"), "p-1");
  EXPECT_EQ(session.pid, getpid());
  // Every device, by index.
  ASSERT_THAT(session.devices, SizeIs(2));
  EXPECT_EQ(session.devices[0].allocations, 0u);
  EXPECT_EQ(session.devices[1].device, 1);
  EXPECT_EQ(session.devices[1].allocated_bytes, 4096u);
  EXPECT_EQ(session.devices[1].reserved_bytes, uint64_t{2} << 20);
  EXPECT_EQ(session.devices[1].allocations, 1u);

  absl::StatusOr<std::map<std::string, int64_t>> device_stats =
      observer().MemoryStats(DeviceIndex(1));
  ASSERT_TRUE(device_stats.ok()) << device_stats.status();
  EXPECT_EQ(device_stats->at("allocated_bytes.all.current"), 4096);
  EXPECT_THAT(*device_stats, SizeIs(122));
  absl::StatusOr<std::map<std::string, int64_t>> session_stats =
      observer().MemoryStats(DeviceIndex(0), client->session_id());
  ASSERT_TRUE(session_stats.ok()) << session_stats.status();
  EXPECT_EQ(session_stats->at("allocated_bytes.all.current"), 0);

  absl::StatusOr<std::string> summary =
      observer().MemorySummary(DeviceIndex(1), std::nullopt, true);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(*summary, HasSubstr("PyTorch CUDA memory summary, device ID 1"));

  absl::StatusOr<std::vector<SegmentInfo>> all = observer().MemorySnapshot();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_THAT(*all, SizeIs(1));
  EXPECT_EQ((*all)[0].device, 1);
  EXPECT_EQ((*all)[0].session_id, client->session_id());
  EXPECT_THAT((*all)[0].blocks, Contains(::testing::Field(&BlockInfo::state, "active_allocated")));
  absl::StatusOr<std::vector<SegmentInfo>> device0 = observer().MemorySnapshot(DeviceIndex(0));
  ASSERT_TRUE(device0.ok()) << device0.status();
  EXPECT_THAT(*device0, IsEmpty());
}

TEST_F(ObserverTest, RefusesAnUnknownSessionAndDevice) {
  EXPECT_THAT(observer().MemoryStats(DeviceIndex(0), SessionId(999)),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(observer().MemoryStats(DeviceIndex(7)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(observer().MemorySnapshot(DeviceIndex(7)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ObserverUnreachableTest, SaysItCannotReachTheDaemon) {
  Observer observer("unix:///nonexistent/gpumux.sock");
  EXPECT_THAT(observer.ListSessions(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("cannot reach gpumuxd at unix:///nonexistent/gpumux.sock")));
  EXPECT_EQ(observer.address(), "unix:///nonexistent/gpumux.sock");
}

}  // namespace
}  // namespace gpumux
