// An operator's kill of a session (gpumux kill-session, Admin.KillSession)
// against a real gpumuxd and real client processes: the killed session's
// memory leaves the device's books at once, the session leaves the list,
// its client's next call fails UNAVAILABLE with the operator's reason, and
// another session is untouched; a peer that is not an operator is refused
// (and its `gpumux health` leaves Admin unchecked).

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpumux/admin.h"
#include "gpumux/observer.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/status_matchers.h"
#include "tests/support/raw_session.h"
#include "tests/support/shell_run.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kMiB = uint64_t{1} << 20;

const std::string kCli = TestBinary(std::string(GPUMUX_BINARY_DIR) + "/client/cli/gpumux");

// A `session` child; its session id once it is ready.
uint64_t Ready(Child& child) {
  const std::string line = child.ReadLine();
  uint64_t id = 0;
  EXPECT_THAT(line, StartsWith("ready "));
  if (line.size() > 6) {
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(6), &id)) << line;
  }
  return id;
}

std::optional<SessionInfo> FindSession(Observer& observer, uint64_t id) {
  absl::StatusOr<std::vector<SessionInfo>> sessions = observer.ListSessions();
  EXPECT_TRUE(sessions.ok()) << sessions.status();
  if (!sessions.ok()) return std::nullopt;
  for (const SessionInfo& session : *sessions) {
    if (session.session_id.value() == id) return session;
  }
  return std::nullopt;
}

// Runs the CLI with `args` as uid/gid `as` (nullopt: as this process);
// its exit code and what it printed.
std::pair<int, std::string> RunCli(const std::vector<std::string>& args,
                                   std::optional<uid_t> as = std::nullopt) {
  std::vector<std::string> all = args;
  all.insert(all.begin(), kCli);
  testing::ShellRun run = testing::RunProgram(std::move(all), as);
  return {run.exit_code, run.output};
}

TEST(KillSessionTest, KilledClientSeesTheReasonAndItsMemoryIsReclaimed) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=256MiB"});
  Observer observer(daemon.address());
  Child victim({"session", daemon.address(), "victim", "pod-a", "ml/p-1", absl::StrCat(32 * kMiB)});
  Child bystander({"session", daemon.address(), "bystander", "-", "-", absl::StrCat(8 * kMiB)});
  const uint64_t victim_id = Ready(victim);
  const uint64_t bystander_id = Ready(bystander);
  ASSERT_NE(victim_id, 0u);
  ASSERT_NE(bystander_id, 0u);
  victim.WriteLine("call");
  ASSERT_EQ(victim.ReadLine(), "ok");

  std::optional<SessionInfo> before = FindSession(observer, victim_id);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->labels.at("pod"), "p-1");
  ASSERT_EQ(before->devices.size(), 1u);
  EXPECT_GE(before->devices[0].reserved_bytes, 32 * kMiB);
  std::optional<SessionInfo> other = FindSession(observer, bystander_id);
  ASSERT_TRUE(other.has_value());
  absl::StatusOr<std::map<std::string, int64_t>> stats = observer.MemoryStats(DeviceIndex(0));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(static_cast<uint64_t>((*stats)["reserved_bytes.all.current"]),
            before->devices[0].reserved_bytes + other->devices[0].reserved_bytes);

  // Root (this test) is an operator: the CLI kills it.
  auto [code, output] = RunCli({"--address", daemon.address(), "kill-session",
                                absl::StrCat(victim_id), "--reason", "node drain"});
  EXPECT_EQ(code, 0) << output;
  EXPECT_EQ(output, absl::StrCat("session ", victim_id,
                                 " killed: node drain; everything it held is reclaimed\n"));

  // Reclaimed before the call returned: only the bystander's bytes remain.
  EXPECT_FALSE(FindSession(observer, victim_id).has_value());
  EXPECT_TRUE(FindSession(observer, bystander_id).has_value());
  stats = observer.MemoryStats(DeviceIndex(0));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(static_cast<uint64_t>((*stats)["reserved_bytes.all.current"]),
            other->devices[0].reserved_bytes);
  EXPECT_EQ(static_cast<uint64_t>((*stats)["allocated_bytes.all.current"]),
            other->devices[0].allocated_bytes);

  // The killed client's library says why, on every call after.
  const std::string killed =
      absl::StrCat("UNAVAILABLE: session ", victim_id, " was killed by an operator: node drain");
  victim.WriteLine("call");
  EXPECT_THAT(victim.ReadLine(), StartsWith(killed));
  victim.WriteLine("call");
  EXPECT_THAT(victim.ReadLine(), StartsWith(killed));
  // The bystander goes on.
  bystander.WriteLine("call");
  EXPECT_EQ(bystander.ReadLine(), "ok");

  // A second kill finds no such session.
  EXPECT_THAT(Admin(daemon.address()).KillSession(SessionId(victim_id), "again"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no session")));
  std::tie(code, output) =
      RunCli({"--address", daemon.address(), "kill-session", absl::StrCat(victim_id)});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(output, HasSubstr(absl::StrCat("NOT_FOUND: no session ", victim_id, " is open")));
  // Bad usage is the CLI's to refuse.
  EXPECT_EQ(RunCli({"--address", daemon.address(), "kill-session", "0"}).first, 2);
  EXPECT_EQ(RunCli({"--address", daemon.address(), "kill-session"}).first, 2);
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(KillSessionTest, ANonOperatorIsRefusedAndNothingEnds) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the CLI as nobody";
  DaemonProcess daemon(
      {"--host-devices=1", "--host-device-memory=64MiB", "--socket-group=nogroup"});
  Child bystander({"session", daemon.address(), "bystander", "-", "-", absl::StrCat(kMiB)});
  const uint64_t id = Ready(bystander);
  ASSERT_NE(id, 0u);
  // nobody may reach the sockets (their group), and is refused as no operator.
  const std::string dir = std::filesystem::path(daemon.socket_path()).parent_path();
  ASSERT_EQ(chmod(dir.c_str(), 0711), 0);
  auto [code, output] =
      RunCli({"--address", daemon.address(), "kill-session", absl::StrCat(id)}, 65534);
  EXPECT_EQ(code, 1) << output;
  EXPECT_THAT(output, HasSubstr("PERMISSION_DENIED: gpumux.v1.Admin serves only root and "
                                "gpumuxd's own uid 0"));
  // health, for nobody, cannot see Admin (its socket serves it to
  // administrators only), which is no failure.
  std::tie(code, output) = RunCli({"--address", daemon.address(), "health"}, 65534);
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("not checked: served to root and gpumuxd's user only"));
  Observer observer(daemon.address());
  EXPECT_TRUE(FindSession(observer, id).has_value());
  bystander.WriteLine("call");
  EXPECT_EQ(bystander.ReadLine(), "ok");
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
}  // namespace gpumux::testing
