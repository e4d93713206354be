// The gpumux command line run in-process: exit codes, usage errors, the
// unreachable-daemon message, and each command against the real daemon in
// this process (host backend).

#include "client/cli/cli.h"

#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"
#include "tests/support/in_process_daemon.h"

namespace gpumux {
namespace {

using ::gpumux::testing::DaemonClientTest;
using ::gpumux::testing::InProcessDaemon;
using ::gpumux::testing::IsOkAndHolds;
using ::gpumux::testing::StatusIs;
using ::testing::ContainsRegex;
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

TEST(CliTest, EveryCommandTakesHelp) {
  for (const char* command :
       {"devices", "stats", "summary", "snapshot", "sessions", "empty-cache", "tenants",
        "tenant-limit", "replay", "kill-session", "health", "top"}) {
    for (const char* help : {"--help", "-h"}) {
      CliRun run = RunGpumux({command, help});
      EXPECT_EQ(run.exit_code, 0) << command << " " << help << ": " << run.err;
      EXPECT_THAT(run.out, StartsWith(std::string("usage: gpumux ") + command)) << command;
      EXPECT_EQ(run.err, "") << command;
    }
  }
  // After "--" it is an argument, not a request for help.
  EXPECT_EQ(RunGpumux({"devices", "--", "--help"}).exit_code, 2);
}

TEST(CliTest, UnreachableDaemonExitsOneNamingTheAddress) {
  for (const char* command :
       {"devices", "stats", "summary", "snapshot", "sessions", "empty-cache", "health"}) {
    CliRun run = RunGpumux({command, "--address", "/nonexistent/gpumux.sock"});
    EXPECT_EQ(run.exit_code, 1) << command;
    EXPECT_THAT(run.err, StartsWith("gpumux: cannot reach gpumuxd at /nonexistent/gpumux.sock: "))
        << command;
    EXPECT_EQ(run.out, "") << command;
  }
}

// The daemon alone: each test connects the clients it needs.
class CliDaemonTest : public DaemonClientTest {
 protected:
  CliDaemonTest() : DaemonClientTest({.connect = false}) {}

  CliRun RunHere(std::vector<std::string> args) {
    args.insert(args.begin(), {"--address", daemon().socket_path()});
    return RunGpumux(std::move(args));
  }

  // A client of tenant "pod" that holds one 1000-byte block in a 2 MiB
  // segment (`held`): what a 4 MiB tenant limit leaves room for.
  std::unique_ptr<Client> ConnectPodHoldingASegment(std::optional<DeviceBuffer>* held) {
    ClientOptions options;
    options.tenant = "pod";
    std::unique_ptr<Client> client = ConnectAnother(options);
    if (client == nullptr) return nullptr;
    absl::StatusOr<DeviceBuffer> small = memory::Allocate(*client, 1000);
    EXPECT_TRUE(small.ok()) << small.status();
    if (small.ok()) held->emplace(*std::move(small));
    return client;
  }
};

TEST_F(CliDaemonTest, Devices) {
  CliRun run = RunHere({"devices"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(
      run.out,
      StartsWith("INDEX  NAME                  BACKEND      TOTAL       FREE  CAPABILITY  SMS  PCI "
                 " HEALTH\n"
                 "    0  gpumux host device 0  host     64.00 MiB  64.00 MiB         0.0 "));
  EXPECT_THAT(run.out, HasSubstr("\n    1  gpumux host device 1  host     64.00 MiB  64.00 MiB "));
  run = RunHere({"devices", "--json"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("\"name\": \"gpumux host device 0\""));
  EXPECT_THAT(run.out, HasSubstr("\"healthy\": true,\n  \"health\": \"ok\""));
}

TEST_F(CliDaemonTest, StatsOfTheDeviceAndOfOneSession) {
  ClientOptions options;
  options.free_batch_delay = absl::InfiniteDuration();
  auto client = ConnectAnother(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client, 1000, DeviceIndex(1));
  ASSERT_OK(buffer);

  CliRun run = RunHere({"stats", "--device", "1", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\n \"allocated_bytes.all.current\": 1024,\n"));
  run = RunHere(
      {"stats", "--device", "1", "--session", std::to_string(client->session_id().value())});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\nallocated_bytes.all.current "));
  EXPECT_THAT(run.out, HasSubstr(" 1024\n"));

  run = RunHere({"stats", "--session", "999"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err, "gpumux: NOT_FOUND: session 999 not found\n");
}

TEST_F(CliDaemonTest, SummaryIsPyTorchsTable) {
  CliRun run = RunHere({"summary", "--device", "1", "--abbreviated"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("PyTorch CUDA memory summary, device ID 1 "));
}

TEST_F(CliDaemonTest, SnapshotShowsEverySessionsBlocks) {
  ClientOptions options;
  auto client = ConnectAnother(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client, 1000);
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
}

TEST_F(CliDaemonTest, SessionsListsEachClientWithItsStreamsAndEvents) {
  ClientOptions options;
  options.client_name = "trainer";
  options.labels = {{"pod", "p-1"}};
  auto client = ConnectAnother(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client, 1000);
  ASSERT_OK(buffer);
  // One stream and two events alive: the sessions listing counts them.
  absl::StatusOr<Stream> stream = client->CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  absl::StatusOr<Event> first = client->CreateEvent(DeviceIndex(0));
  absl::StatusOr<Event> second = client->CreateEvent(DeviceIndex(1));
  ASSERT_OK(first);
  ASSERT_OK(second);

  CliRun run = RunHere({"sessions"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("trainer"));
  EXPECT_THAT(run.out, HasSubstr("pod=p-1"));
  EXPECT_THAT(run.out, HasSubstr("STREAMS  EVENTS"));
  run = RunHere({"sessions", "--json"});
  EXPECT_THAT(run.out, HasSubstr("\"client_name\": \"trainer\""));
  EXPECT_THAT(run.out, HasSubstr("\"streams\": 1,\n  \"events\": 2,"));
  *first = Event();  // destroyed on the daemon
  run = RunHere({"sessions", "--json"});
  EXPECT_THAT(run.out, HasSubstr("\"streams\": 1,\n  \"events\": 1,"));

  // A client's end is its session's.
  *second = Event();
  memory::Release(*client, std::move(buffer).value());
  client.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  while (RunHere({"sessions", "--json"}).out != "[]\n" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(RunHere({"sessions", "--json"}).out, "[]\n");
}

TEST_F(CliDaemonTest, TenantLimitIsEnforced) {
  CliRun run = RunHere({"tenant-limit", "pod", "4MiB"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "tenant 'pod': limit 4194304 bytes (4.00 MiB) on every device\n");
  std::unique_ptr<Client> client;
  std::optional<DeviceBuffer> small;  // freed before its client goes
  client = ConnectPodHoldingASegment(&small);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(small.has_value());
  EXPECT_THAT(memory::Allocate(*client, 3 << 20),  // a 20 MiB segment
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("Its tenant 'pod'")));
  run = RunHere({"tenant-limit", "pod", "none", "--device", "0"});
  EXPECT_EQ(run.out, "tenant 'pod': no limit on GPU 0\n");
  EXPECT_OK(memory::Allocate(*client, 3 << 20));
  // What the daemon refuses, and what the CLI refuses before asking.
  run = RunHere({"tenant-limit", "", "1GiB"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("INVALID_ARGUMENT: the tenant must not be empty"));
  run = RunHere({"tenant-limit", "pod", "1GiB", "--device", "7"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("INVALID_ARGUMENT"));
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"tenant-limit", "pod"},
                                             {"tenant-limit", "pod", "0"},
                                             {"tenant-limit", "pod", "12XB"},
                                             {"tenant-limit", "pod", "1GiB", "extra"},
                                             {"tenants", "extra"}}) {
    run = RunHere(args);
    EXPECT_EQ(run.exit_code, 2) << args[1];
    EXPECT_THAT(run.err, HasSubstr("usage: gpumux ten")) << args[1];
  }
  run = RunGpumux({"--address", "localhost:1", "tenants"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("is not a Unix socket"));
}

TEST_F(CliDaemonTest, TenantsListsEachTenantsLimitAndUsage) {
  ASSERT_EQ(RunHere({"tenant-limit", "pod", "4MiB"}).exit_code, 0);
  std::unique_ptr<Client> client;
  std::optional<DeviceBuffer> small;  // freed before its client goes
  client = ConnectPodHoldingASegment(&small);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(small.has_value());
  EXPECT_THAT(memory::Allocate(*client, 3 << 20), StatusIs(absl::StatusCode::kResourceExhausted));
  CliRun run = RunHere({"tenants"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("TENANT  DEVICE     LIMIT  RESERVED   ALLOCATED  SESSIONS\n"));
  EXPECT_THAT(run.out, ContainsRegex("\npod +0 +4\\.00 MiB +2\\.00 MiB +1024 bytes +[0-9]+\n"));
  EXPECT_THAT(run.out, ContainsRegex("\n +1 +4\\.00 MiB +0 bytes +0 bytes +[0-9]+\n"));
  run = RunHere({"tenants", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\"tenant\": \"pod\""));
  EXPECT_THAT(run.out, HasSubstr("\"limit_bytes\": 4194304"));
  EXPECT_THAT(run.out, HasSubstr("\"reserved_bytes\": 2097152"));
}

TEST_F(CliDaemonTest, HealthShowsEveryServiceAndDevice) {
  CliRun run = RunHere({"health"});
  EXPECT_EQ(run.exit_code, 0) << run.err << run.out;
  EXPECT_THAT(run.out, StartsWith("SERVICE  "));
  for (const char* service :
       {"Session", "Device", "Memory", "Observe", "Stream", "Event", "Copy", "Random", "Nvtx"}) {
    EXPECT_THAT(run.out, ContainsRegex(absl::StrCat("\ngpumux\\.v1\\.", service,
                                                    " +unix://[^ ]+/gpumux\\.sock +SERVING\n")))
        << service;
  }
  // This test runs as the daemon's user: an operator, served on the admin socket.
  EXPECT_THAT(run.out, ContainsRegex("\ngpumux\\.v1\\.Admin +unix://[^ ]+\\.admin +SERVING\n"));
  EXPECT_THAT(run.out, ContainsRegex("\nDEVICE  NAME +HEALTH\n +0  [^\n]+ ok\n +1  "));
  EXPECT_THAT(run.out, HasSubstr("\nhealthy\n"));
  EXPECT_EQ(RunHere({"health", "extra"}).exit_code, 2);
}

TEST_F(CliDaemonTest, TopOncePrintsDevicesAndSessionsSortedByMemory) {
  ClientOptions big_options;
  big_options.client_name = "big";
  big_options.tenant = "pod-a";
  big_options.labels = {{"pod", "p-1"}, {"namespace", "ml"}};
  std::unique_ptr<Client> big = ConnectAnother(big_options);
  ClientOptions small_options;
  small_options.client_name = "small";
  std::unique_ptr<Client> small = ConnectAnother(small_options);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(*big, 6 << 20);
  absl::StatusOr<DeviceBuffer> b = memory::Allocate(*small, 1 << 20);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  CliRun run = RunHere({"top", "--once"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("gpumux top - "));
  EXPECT_THAT(run.out, HasSubstr("sort: allocated\n"));
  EXPECT_THAT(run.out, ContainsRegex("\nGPU 0  [^\n]+\n  \\[#+[=-]* *\\]  allocated 7\\.00 MiB"));
  EXPECT_THAT(run.out, HasSubstr("\nSESSION  CLIENT"));
  EXPECT_THAT(run.out, ContainsRegex("\n +[0-9]+  big +[0-9]+  pod-a +ml/p-1 +6\\.00 MiB"));
  EXPECT_EQ(run.out.find('\x1b'), std::string::npos) << "escape codes in --once";
  EXPECT_LT(run.out.find("  big "), run.out.find("  small "));
  // Not a terminal, and no --once: refused, saying why.
  run = RunHere({"top"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("stdout is not one; --once prints one frame"));
  for (const char* interval : {"0", "abc", "-1", "nan", "5000"}) {
    run = RunHere({"top", "--once", "--interval", interval});
    EXPECT_EQ(run.exit_code, 2) << interval;
    EXPECT_THAT(run.err, HasSubstr("--interval wants seconds")) << interval;
  }
  EXPECT_EQ(RunHere({"top", "--once", "--interval=0.25"}).exit_code, 0);
}

TEST_F(CliDaemonTest, EmptyCacheReleasesEverySessionsCache) {
  ClientOptions options;
  options.free_batch_delay = absl::InfiniteDuration();
  auto client = ConnectAnother(options);
  ASSERT_NE(client, nullptr);
  {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client, 1000);
    ASSERT_OK(buffer);
  }
  ASSERT_OK(memory::FlushFrees(*client));
  CliRun run = RunHere({"empty-cache"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "released 2097152 bytes (2.00 MiB) in 1 segment\n");
  run = RunHere({"empty-cache", "--device", "1"});
  EXPECT_EQ(run.out, "released nothing: no cached segment was free\n");
  EXPECT_THAT(memory::MemoryReserved(*client), IsOkAndHolds(0));
}

TEST(CliDaemonReplayTest, ReplayThroughTheDaemonMatchesInProcess) {
  const std::string trace = GPUMUX_SOURCE_DIR "/testdata/trace_resnet50_train_b64.csv.gz";
  CliRun in_process = RunGpumux({"replay", trace});
  if (in_process.exit_code == 1 &&
      in_process.err.find("not part of this build") != std::string::npos) {
    GTEST_SKIP() << "built without bench/";
  }
  ASSERT_EQ(in_process.exit_code, 0) << in_process.err;
  // As large as the trace's peak needs (host segments are only ftruncated
  // shared memory, so nothing is touched).
  InProcessDaemon::Options large;
  large.device_memory = uint64_t{8} << 30;
  InProcessDaemon daemon(large);
  CliRun through_daemon = RunGpumux({"--address", daemon.socket_path(), "replay", trace});
  ASSERT_EQ(through_daemon.exit_code, 0) << through_daemon.err;

  // Batched frees still reach the allocator before the next allocation, so
  // it sees the same sequence and ends with the same figures.
  auto local = ReplayFigures(in_process.out);
  auto remote = ReplayFigures(through_daemon.out);
  for (const char* key :
       {"peak_requested", "peak_allocated", "peak_reserved", "device_allocs", "operations"}) {
    EXPECT_EQ(remote[key], local[key]) << key;
  }
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

TEST(CliReplayTest, AllocatorConfChoosesTheInProcessAllocatorsMode) {
  const std::string trace = GPUMUX_SOURCE_DIR "/testdata/trace_resnet50_train_b64.csv.gz";
  CliRun run = RunGpumux({"replay", trace, "--allocator-conf", "expandable_segments:True"});
  if (run.exit_code == 1 && run.err.find("not part of this build") != std::string::npos) {
    GTEST_SKIP() << "built without bench/";
  }
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // PyTorch's own expandable_segments figures on the H200.
  EXPECT_THAT(run.out, HasSubstr("\npeak_reserved=5599395840\n"));
  EXPECT_THAT(run.out, HasSubstr("\ndevice_allocs=90\n"));
  run = RunGpumux({"replay", trace, "--allocator-conf", "compact_segments:True"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\nreserved_over_requested=1.00"));

  run = RunGpumux({"replay", trace, "--allocator-conf", "expandable_segments:yes"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("Expected a single True/False argument for expandable_segments"));
  run = RunGpumux({"--address", "/nonexistent.sock", "replay", trace, "--allocator-conf",
                   "compact_segments:True"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("gpumuxd --allocator-conf"));
}

}  // namespace
}  // namespace gpumux
