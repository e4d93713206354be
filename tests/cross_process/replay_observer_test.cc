// The check of the stats page: while a client replays a real
// PyTorch trace in local allocation mode (gpumux_test_child replay), the
// gpumux CLI run as another process (`gpumux stats --json`) reports, at each
// quiescent point, every one of the 122 keys equal to the client's own view,
// for the session and for the device.

#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/support/raw_session.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {
namespace {

const std::string kCli = TestBinary(std::string(GPUMUX_BINARY_DIR) + "/client/cli/gpumux");

// `gpumux stats --json` with `args`, as another process, parsed.
std::map<std::string, int64_t> CliStats(const std::string& address, const std::string& args) {
  const std::string command = absl::StrCat(kCli, " --address ", address, " stats --json ", args);
  FILE* pipe = popen(command.c_str(), "r");
  std::map<std::string, int64_t> stats;
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return stats;
  }
  char line[512];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    // ` "key": value,` lines between the braces.
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (parts.size() != 2) continue;
    std::string key(absl::StripAsciiWhitespace(parts[0]));
    std::string value(absl::StripSuffix(absl::StripAsciiWhitespace(parts[1]), ","));
    int64_t number = 0;
    if (key.size() < 2 || !absl::SimpleAtoi(value, &number)) {
      ADD_FAILURE() << "unexpected line: " << line;
      continue;
    }
    stats[key.substr(1, key.size() - 2)] = number;
  }
  EXPECT_EQ(pclose(pipe), 0) << command;
  return stats;
}

TEST(ReplayObserverTest, AnotherProcessSeesEveryKeyOfALocalReplayAtQuiescentPoints) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=8GiB"});
  Child replay({"replay", daemon.address(),
                std::string(GPUMUX_SOURCE_DIR) + "/testdata/trace_resnet50_train_b64.csv.gz", "3"});
  int points = 0;
  for (std::string line = replay.ReadLine(); !line.empty(); line = replay.ReadLine()) {
    std::istringstream fields(line);
    std::string session, pair;
    fields >> session;
    std::map<std::string, int64_t> own;
    while (fields >> pair) {
      std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      ASSERT_EQ(kv.size(), 2u) << pair;
      ASSERT_TRUE(absl::SimpleAtoi(kv[1], &own[kv[0]])) << pair;
    }
    ASSERT_EQ(own.size(), 122u);
    EXPECT_EQ(CliStats(daemon.address(), "--session " + session), own) << "point " << points;
    // The device has this one session: its figures are the session's.
    EXPECT_EQ(CliStats(daemon.address(), "--device 0"), own) << "point " << points;
    ++points;
    if (points == 2) {
      EXPECT_GT(own.at("allocated_bytes.all.current"), 0);
    }
    replay.WriteLine("go");
  }
  EXPECT_GE(points, 4);  // at least three pauses, and the end
}

}  // namespace
}  // namespace gpumux::testing
