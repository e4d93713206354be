// gpumuxd's command line as a user meets it: --help lists every flag as the
// README spells it (dashes, with defaults and size units), and bad command
// lines exit 2 saying what was wrong.

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct ProcessRun {
  int exit_code = -1;
  std::string output;
};

ProcessRun RunGpumuxd(const std::string& args) {
  const std::string command =
      TestBinary(std::string(GPUMUX_BINARY_DIR) + "/server/gpumuxd") + " " + args + " 2>&1";
  ProcessRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(GpumuxdFlagsTest, HelpListsEveryFlagAsTheReadmeSpellsIt) {
  for (const char* help : {"--help", "-h"}) {
    const ProcessRun run = RunGpumuxd(help);
    EXPECT_EQ(run.exit_code, 0) << help;
    for (const char* flag : {"--socket", "--socket-group", "--listen", "--backend",
                             "--host-devices", "--host-device-memory", "--host-stream-workers",
                             "--allocator-conf", "--log-level", "--max-sessions", "--max-streams",
                             "--max-events", "--max-share-tokens", "--blocking-threads"}) {
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
  run = RunGpumuxd("--no-such-flag=1");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("no_such_flag"));
}

}  // namespace
}  // namespace gpumux::testing
