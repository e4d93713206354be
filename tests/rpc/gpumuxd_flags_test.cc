// gpumuxd's command line as a user meets it: --help lists every flag as the
// README spells it (dashes, with defaults and size units), and bad command
// lines exit 2 saying what was wrong.

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/shell_run.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using ProcessRun = ::gpumux::testing::ShellRun;

ProcessRun RunGpumuxd(const std::string& args) {
  return ::gpumux::testing::RunShell(
      TestBinary(std::string(GPUMUX_BINARY_DIR) + "/server/gpumuxd") + " " + args);
}

TEST(GpumuxdFlagsTest, HelpListsEveryFlagAsTheReadmeSpellsIt) {
  for (const char* help : {"--help", "-h"}) {
    const ProcessRun run = RunGpumuxd(help);
    EXPECT_EQ(run.exit_code, 0) << help;
    for (const char* flag :
         {"--socket", "--socket-group", "--listen", "--backend", "--nccl", "--host-devices",
          "--host-device-memory", "--host-stream-workers", "--allocator-conf", "--log-level",
          "--max-sessions", "--max-streams", "--max-events", "--max-share-tokens",
          "--blocking-threads", "--tenant-memory-limit"}) {
      EXPECT_THAT(run.output, HasSubstr(std::string("  ") + flag + "\n")) << flag;
    }
    EXPECT_THAT(run.output, HasSubstr("KiB, MiB, GiB, TiB"));
    EXPECT_THAT(run.output, HasSubstr("(default: 8GiB)"));
    EXPECT_THAT(run.output, Not(HasSubstr("No flags matched")));
    EXPECT_THAT(run.output, Not(HasSubstr("host_device_memory")));
  }
}

TEST(GpumuxdFlagsTest, BadCommandLinesExit2SayingWhy) {
  ProcessRun run = RunGpumuxd("--host-devices=2 extra");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("unexpected argument 'extra'"));
  run = RunGpumuxd("--host-device-memory=12XB");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("--host-device-memory"));
  run = RunGpumuxd("--nccl=");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("--nccl is auto, off or the path of a libnccl.so, not empty"));
  run = RunGpumuxd("--no-such-flag=1");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("no_such_flag"));
}

TEST(GpumuxdFlagsTest, BadTenantMemoryLimitsExit2NamingTheItem) {
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--tenant-memory-limit=pod", "'pod' is not TENANT=SIZE"},
           {"--tenant-memory-limit==1GiB", "'=1GiB': the tenant is empty"},
           {"--tenant-memory-limit=pod=12XB", "'pod=12XB': "},
           {"--tenant-memory-limit=pod=0", "'pod=0': a limit must be positive"},
           {"--tenant-memory-limit=a=1GiB,,b=2GiB", "'' is not TENANT=SIZE"},
           {"--tenant-memory-limit=a=1GiB --tenant-memory-limit=b=-1", "'b=-1': "},
           {"\"--tenant-memory-limit=$(printf 'a\\001b')=1GiB\"", "control character U+0001"},
       }) {
    // Were the limits taken, start would fail on --backend instead.
    const ProcessRun run = RunGpumuxd("--backend=bogus " + args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_THAT(run.output, HasSubstr("--tenant-memory-limit")) << args;
    EXPECT_THAT(run.output, HasSubstr(says)) << args;
  }
}

}  // namespace
}  // namespace gpumux::testing
