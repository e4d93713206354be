// The gpumux command line run in-process: exit codes, usage errors, the
// unreachable-daemon message, and each command against FakeDaemon.

#include "client/cli/cli.h"

#include <sstream>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_daemon.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::FakeDaemon;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct CliRun {
  int exit_code;
  std::string out;
  std::string err;
};

CliRun RunGpumux(std::vector<std::string> args) {
  std::ostringstream out;
  std::ostringstream err;
  int code = RunCli(std::move(args), out, err);
  return {code, out.str(), err.str()};
}

TEST(CliTest, NoCommandIsAUsageError) {
  CliRun run = RunGpumux({});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, StartsWith("gpumux: no command given\n\nusage: gpumux [--address ADDRESS]"));
  EXPECT_EQ(run.out, "");
}

TEST(CliTest, HelpPrintsUsageToStdout) {
  CliRun run = RunGpumux({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("gpumux stats [--device N] [--session ID] [--json]\n"));
  EXPECT_EQ(RunGpumux({"help"}).exit_code, 0);
}

TEST(CliTest, BadCommandsAndFlagsExitTwoWithUsage) {
  CliRun run = RunGpumux({"frobnicate"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, StartsWith("gpumux: unknown command frobnicate\n"));

  run = RunGpumux({"stats", "--bogus"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err,
            "gpumux: unknown flag --bogus\n\n"
            "usage: gpumux stats [--device N] [--session ID] [--json]\n");

  run = RunGpumux({"stats", "--device", "minus-one"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, StartsWith("gpumux: --device wants an integer in [0, 2147483647], got "
                                  "'minus-one'\n"));

  EXPECT_EQ(RunGpumux({"devices", "extra"}).exit_code, 2);
  EXPECT_EQ(RunGpumux({"devices", "--address"}).exit_code, 2);
  EXPECT_EQ(RunGpumux({"--verbose", "devices"}).exit_code, 2);
}

TEST(CliTest, UnreachableDaemonExitsOneNamingTheAddress) {
  for (const char* command :
       {"devices", "stats", "summary", "snapshot", "sessions", "empty-cache"}) {
    CliRun run = RunGpumux({command, "--address", "/nonexistent/gpumux.sock"});
    EXPECT_EQ(run.exit_code, 1) << command;
    EXPECT_THAT(run.err, StartsWith("gpumux: cannot reach gpumuxd at /nonexistent/gpumux.sock: "))
        << command;
    EXPECT_EQ(run.out, "") << command;
  }
}

class CliDaemonTest : public ::testing::Test {
 protected:
  CliRun RunHere(std::vector<std::string> args) {
    args.insert(args.begin(), {"--address", daemon_.socket_path()});
    return RunGpumux(std::move(args));
  }

  FakeDaemon daemon_;
};

TEST_F(CliDaemonTest, Devices) {
  CliRun run = RunHere({"devices"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("INDEX  NAME   BACKEND"));
  EXPECT_THAT(run.out, HasSubstr("fake1"));
  run = RunHere({"devices", "--json"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("\"name\": \"fake0\""));
}

TEST_F(CliDaemonTest, StatsOfTheDeviceAndOfOneSession) {
  ClientOptions options;
  options.free_batch_delay = absl::InfiniteDuration();
  auto client = Client::Connect(daemon_.address(), options);
  ASSERT_OK(client);
  absl::StatusOr<DeviceBuffer> buffer = (*client)->Allocate(1000, DeviceIndex(1));
  ASSERT_OK(buffer);

  CliRun run = RunHere({"stats", "--device", "1", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\n \"allocated_bytes.all.current\": 1024,\n"));
  run = RunHere(
      {"stats", "--device", "1", "--session", std::to_string((*client)->session_id().value())});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\nallocated_bytes.all.current "));
  EXPECT_THAT(run.out, HasSubstr(" 1024\n"));

  run = RunHere({"stats", "--session", "999"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err, "gpumux: NOT_FOUND: session 999 not found\n");
}

TEST_F(CliDaemonTest, SummaryIsPrintedAsIs) {
  CliRun run = RunHere({"summary", "--device", "1", "--abbreviated"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "observed summary of device 1\n");
}

TEST_F(CliDaemonTest, SnapshotAndSessions) {
  ClientOptions options;
  options.client_name = "trainer";
  options.labels = {{"pod", "p-1"}};
  auto client = Client::Connect(daemon_.address(), options);
  ASSERT_OK(client);
  absl::StatusOr<DeviceBuffer> buffer = (*client)->Allocate(1000);
  ASSERT_OK(buffer);

  CliRun run = RunHere({"snapshot", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("[\n {\n  \"device\": 0,\n"));
  EXPECT_THAT(run.out, HasSubstr("\"requested_size\": 1000,"));
  run = RunHere({"snapshot", "--device", "1", "--json"});
  EXPECT_EQ(run.out, "[]\n");
  run = RunHere({"snapshot"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, StartsWith("DEVICE  SEGMENT"));

  run = RunHere({"sessions"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("trainer"));
  EXPECT_THAT(run.out, HasSubstr("pod=p-1"));
  run = RunHere({"sessions", "--json"});
  EXPECT_THAT(run.out, HasSubstr("\"client_name\": \"trainer\""));
}

TEST_F(CliDaemonTest, EmptyCacheReleasesEverySessionsCache) {
  ClientOptions options;
  options.free_batch_delay = absl::InfiniteDuration();
  auto client = Client::Connect(daemon_.address(), options);
  ASSERT_OK(client);
  {
    absl::StatusOr<DeviceBuffer> buffer = (*client)->Allocate(1000);
    ASSERT_OK(buffer);
  }
  ASSERT_OK((*client)->FlushFrees());
  CliRun run = RunHere({"empty-cache"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "released 2097152 bytes (2.00 MiB) in 1 segment\n");
  run = RunHere({"empty-cache", "--device", "1"});
  EXPECT_EQ(run.out, "released 0 bytes (0 bytes) in 0 segments\n");
}

TEST(CliReplayTest, ReplaysATraceInProcess) {
  CliRun run = RunGpumux({"replay", GPUMUX_SOURCE_DIR "/testdata/trace_resnet50_train_b64.csv.gz"});
  if (run.exit_code == 1 && run.err.find("not part of this build") != std::string::npos) {
    GTEST_SKIP() << "built without bench/";
  }
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\npeak_reserved="));
  EXPECT_THAT(run.out, HasSubstr("\nops_per_second="));

  run = RunGpumux({"replay"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, StartsWith("gpumux: replay needs a trace file\n"));
  run = RunGpumux({"replay", "/nonexistent/trace.csv.gz"});
  EXPECT_EQ(run.exit_code, 1);
  run = RunGpumux({"replay", "t.csv.gz", "--repeat", "0"});
  EXPECT_EQ(run.exit_code, 2);
}

}  // namespace
}  // namespace gpumux
