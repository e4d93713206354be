// The client library and CLI against the real Daemon (host backend) in this
// process: what FakeDaemon cannot vouch for, i.e. that both sides agree.

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "absl/time/clock.h"
#include "client/cli/cli.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/daemon.h"
#include "tests/client/status_or_matchers.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::client_testing::IsOkAndHolds;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

class ClientDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/gpumux-client-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    Daemon::Options options;
    options.socket_path = dir_ + "/gpumux.sock";
    options.backend = "host";
    options.host_devices = 2;
    options.host_device_memory = DeviceMemory();
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
    ASSERT_OK(daemon);
    daemon_ = std::move(daemon).value();
  }

  void TearDown() override {
    daemon_.reset();
    std::filesystem::remove_all(dir_);
  }

  virtual uint64_t DeviceMemory() const { return uint64_t{64} << 20; }

  std::string address() const { return "unix://" + daemon_->socket_path(); }

  std::unique_ptr<Client> Connect(const ClientOptions& options = ClientOptions()) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(address(), options);
    EXPECT_OK(client);
    return client.ok() ? std::move(client).value() : nullptr;
  }

  // Runs the CLI against this daemon; stdout, and the exit code in *code.
  std::string Cli(std::vector<std::string> args, int* code) {
    args.insert(args.begin(), {"--address", daemon_->socket_path()});
    std::ostringstream out, err;
    *code = RunCli(std::move(args), out, err);
    EXPECT_EQ(err.str(), "");
    return out.str();
  }

  template <typename Condition>
  static bool Eventually(Condition condition) {
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    while (absl::Now() < deadline) {
      if (condition()) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return condition();
  }

  std::string dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(ClientDaemonTest, AllocateWriteAndFreeAsTorchCountsIt) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->backend(), "host");
  EXPECT_OK(client->Ping());
  EXPECT_THAT(client->DeviceCount(), IsOkAndHolds(2));

  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(1000);
  ASSERT_OK(buffer);
  EXPECT_EQ(buffer->size(), 1000u);
  EXPECT_EQ(buffer->allocated_size(), 1024u);  // PyTorch rounds to 512
  ASSERT_NE(buffer->data(), nullptr);
  std::memset(buffer->data(), 0xab, buffer->size());
  EXPECT_THAT(client->MemoryAllocated(), IsOkAndHolds(1024));
  EXPECT_THAT(client->MemoryReserved(), IsOkAndHolds(2 << 20));  // one small segment

  client->Release(std::move(buffer).value());
  EXPECT_THAT(client->MemoryAllocated(), IsOkAndHolds(0));
  EXPECT_THAT(client->MaxMemoryAllocated(), IsOkAndHolds(1024));
  absl::StatusOr<std::map<std::string, int64_t>> stats = client->MemoryStats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->size(), 122u);
  EXPECT_EQ(stats->at("allocation.all.allocated"), 1);
  EXPECT_EQ(stats->at("allocation.all.freed"), 1);
}

TEST_F(ClientDaemonTest, DaemonErrorsArriveWithTheirCodes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client->Allocate(512, DeviceIndex(7)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client->Allocate(uint64_t{48} << 20), IsOkAndHolds(::testing::_));
  EXPECT_OK(client->SetPerProcessMemoryFraction(0.25, DeviceIndex(1)));
  EXPECT_THAT(client->Allocate(uint64_t{32} << 20, DeviceIndex(1)),
              StatusIs(absl::StatusCode::kResourceExhausted, StartsWith("CUDA out of memory.")));
  EXPECT_OK(client->SetMemoryLimit(0, DeviceIndex(1)));
  EXPECT_OK(client->Allocate(uint64_t{32} << 20, DeviceIndex(1)).status());
}

TEST_F(ClientDaemonTest, SnapshotShowsTheSessionsSegments) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(3000, DeviceIndex(1));
  ASSERT_OK(buffer);
  absl::StatusOr<std::vector<SegmentInfo>> snapshot = client->MemorySnapshot();
  ASSERT_OK(snapshot);
  ASSERT_EQ(snapshot->size(), 1u);
  const SegmentInfo& segment = snapshot->front();
  EXPECT_EQ(segment.device, 1);
  EXPECT_EQ(segment.segment_id, buffer->segment_id());
  EXPECT_EQ(segment.session_id, client->session_id());
  EXPECT_EQ(segment.segment_type, "small");
  ASSERT_FALSE(segment.blocks.empty());
  EXPECT_EQ(segment.blocks.front().address, buffer->address());
  EXPECT_EQ(segment.blocks.front().state, "active_allocated");
  EXPECT_THAT(client->MemorySnapshot(DeviceIndex(0)), IsOkAndHolds(IsEmpty()));
}

TEST_F(ClientDaemonTest, SharedMemoryIsTheSameBytesInBothSessions) {
  auto producer = Connect();
  auto consumer = Connect();
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  AllocateOptions shareable;
  shareable.shareable = true;
  absl::StatusOr<DeviceBuffer> original = producer->Allocate(4096, DeviceIndex(0), shareable);
  ASSERT_OK(original);
  std::memcpy(original->data(), "weights", 7);
  absl::StatusOr<std::string> token = producer->Share(*original);
  ASSERT_OK(token);
  absl::StatusOr<DeviceBuffer> imported = consumer->Import(*token);
  ASSERT_OK(imported);
  EXPECT_EQ(std::string(static_cast<char*>(imported->data()), 7), "weights");
  std::memcpy(imported->data(), "WEIGHTS", 7);
  EXPECT_EQ(std::string(static_cast<char*>(original->data()), 7), "WEIGHTS");
}

TEST_F(ClientDaemonTest, EmptyCacheUnmapsTheReleasedSegment) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  { ASSERT_OK(client->Allocate(1000).status()); }
  EXPECT_EQ(client->MappedSegmentCountForTest(), 1u);
  absl::StatusOr<ReleasedCache> released = client->EmptyCache();
  ASSERT_OK(released);
  EXPECT_EQ(released->released_segments, 1u);
  EXPECT_EQ(released->released_bytes, 2u << 20);
  EXPECT_TRUE(Eventually([&] { return client->MappedSegmentCountForTest() == 0; }));
  EXPECT_THAT(client->MemoryReserved(), IsOkAndHolds(0));
}

TEST_F(ClientDaemonTest, CliSeesSessionsAndTheirMemory) {
  ClientOptions options;
  options.client_name = "e2e-trainer";
  options.labels = {{"pod", "p-1"}};
  auto client = Connect(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(1000);
  ASSERT_OK(buffer);

  int code;
  std::string out = Cli({"sessions"}, &code);
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("e2e-trainer"));
  EXPECT_THAT(out, HasSubstr("pod=p-1"));
  out = Cli({"stats", "--json", "--session", std::to_string(client->session_id().value())}, &code);
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("\n \"allocated_bytes.all.current\": 1024,\n"));
  out = Cli({"snapshot", "--json"}, &code);
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("\"requested_size\": 1000,"));
  out = Cli({"devices"}, &code);
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("host"));
  out = Cli({"summary"}, &code);
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("PyTorch CUDA memory summary"));
}

TEST_F(ClientDaemonTest, EndingTheClientEndsItsSession) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(1000);
  ASSERT_OK(buffer);
  client->Release(std::move(buffer).value());
  client.reset();
  int code;
  EXPECT_TRUE(Eventually([&] { return Cli({"sessions", "--json"}, &code) == "[]\n"; }));
}

TEST_F(ClientDaemonTest, ShutdownMakesCallsUnavailable) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  daemon_->Shutdown();
  EXPECT_TRUE(Eventually([&] { return absl::IsUnavailable(client->Ping()); }));
  EXPECT_THAT(client->Allocate(512),
              StatusIs(absl::StatusCode::kUnavailable, StartsWith("cannot reach gpumuxd at ")));
}

}  // namespace
}  // namespace gpumux

namespace gpumux {
namespace {

// A device as large as the trace's peak needs (its segments are only
// ftruncated shared memory, so nothing is touched).
class ClientDaemonReplayTest : public ClientDaemonTest {
 protected:
  uint64_t DeviceMemory() const override { return uint64_t{8} << 30; }
};

// name=value lines of FormatReplayResult.
std::map<std::string, std::string> ReplayFigures(const std::string& text) {
  std::map<std::string, std::string> figures;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) figures[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return figures;
}

TEST_F(ClientDaemonReplayTest, ReplayThroughTheDaemonMatchesInProcess) {
  const std::string trace = GPUMUX_SOURCE_DIR "/testdata/trace_resnet50_train_b64.csv.gz";
  std::ostringstream in_process_out, in_process_err;
  int code = RunCli({"replay", trace}, in_process_out, in_process_err);
  if (code == 1 && in_process_err.str().find("not part of this build") != std::string::npos) {
    GTEST_SKIP() << "built without bench/";
  }
  ASSERT_EQ(code, 0) << in_process_err.str();
  std::string through_daemon = Cli({"replay", trace}, &code);
  ASSERT_EQ(code, 0);

  // Batched frees still reach the allocator before the next allocation, so
  // it sees the same sequence and ends with the same figures.
  auto local = ReplayFigures(in_process_out.str());
  auto remote = ReplayFigures(through_daemon);
  for (const char* key :
       {"peak_requested", "peak_allocated", "peak_reserved", "device_allocs", "operations"}) {
    EXPECT_EQ(remote[key], local[key]) << key;
  }
}

}  // namespace
}  // namespace gpumux
