// Clients that allocate locally hold their cache in their own processes;
// the daemon reaches it through their session streams (docs/design.md,
// "Pressure" and "Snapshots of local memory"). Real gpumuxd, real child
// processes (gpumux_test_child cache): another process's cached leases are
// returned for an allocation that needs them, a stopped client delays the
// requester by the reply timeout and no more, another process's snapshot
// lists the blocks of local leases, and a client SIGKILLed in the middle of
// any of it leaves nothing behind in the daemon.

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/observer.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = int64_t{1} << 20;
const DeviceIndex kDevice(0);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Descriptors the process has open now.
int OpenDescriptors(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
  closedir(dir);
  return count;
}

// SIGSTOPs `pid` and waits until every thread of it has stopped (a stop
// signal takes effect asynchronously).
void Stop(pid_t pid) {
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const Clock::time_point start = Clock::now();
  while (SecondsSince(start) < 5) {
    DIR* dir = opendir(absl::StrCat("/proc/", pid, "/task").c_str());
    ASSERT_NE(dir, nullptr);
    bool all_stopped = true;
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      FILE* stat =
          std::fopen(absl::StrCat("/proc/", pid, "/task/", entry->d_name, "/stat").c_str(), "r");
      if (stat == nullptr) continue;
      char line[512] = {};
      std::fgets(line, sizeof(line), stat);
      std::fclose(stat);
      // "pid (comm) STATE ...": the state follows the last ')'.
      const char* paren = std::strrchr(line, ')');
      if (paren == nullptr || paren[1] != ' ' || (paren[2] != 't' && paren[2] != 'T'))
        all_stopped = false;
    }
    closedir(dir);
    if (all_stopped) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  FAIL() << "process " << pid << " did not stop within 5 s";
}

// A local-allocating child (gpumux_test_child cache), ready.
std::unique_ptr<Child> StartCache(const DaemonProcess& daemon, uint64_t block_mib, int count,
                                  int keep) {
  auto child = std::make_unique<Child>(std::vector<std::string>{
      "cache", daemon.address(), absl::StrCat(block_mib), absl::StrCat(count), absl::StrCat(keep)});
  EXPECT_EQ(child->ReadLine(), "ready");
  return child;
}

// "reserved R allocated A" as the child sees its own memory.
std::pair<int64_t, int64_t> ChildStats(Child& child) {
  child.WriteLine("stats");
  long long reserved = -1, allocated = -1;
  const std::string line = child.ReadLine();
  EXPECT_EQ(std::sscanf(line.c_str(), "reserved %lld allocated %lld", &reserved, &allocated), 2)
      << line;
  return {reserved, allocated};
}

SessionId SessionNamed(Observer& observer, const std::string& name) {
  absl::StatusOr<std::vector<SessionInfo>> sessions = observer.ListSessions();
  EXPECT_TRUE(sessions.ok()) << sessions.status();
  if (!sessions.ok()) return SessionId(0);
  for (const SessionInfo& session : *sessions) {
    if (session.client_name == name) return session.session_id;
  }
  ADD_FAILURE() << "no session named " << name;
  return SessionId(0);
}

std::unique_ptr<Client> LocalClient(const DaemonProcess& daemon) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(daemon.address(), {.allocation = AllocationMode::kLocal});
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

int64_t Stat(Client& client, const std::string& key) {
  absl::StatusOr<std::map<std::string, int64_t>> stats = memory::MemoryStats(client, kDevice);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? stats->at(key) : -1;
}

// Waits up to 5 s for the daemon to hold no memory and `descriptors` open.
void ExpectNothingLeft(const DaemonProcess& daemon, Observer& observer, int descriptors) {
  const Clock::time_point start = Clock::now();
  int64_t reserved = -1;
  int open = -1;
  while (SecondsSince(start) < 5) {
    absl::StatusOr<std::map<std::string, int64_t>> stats = observer.MemoryStats(kDevice);
    ASSERT_TRUE(stats.ok()) << stats.status();
    reserved = stats->at("reserved_bytes.all.current");
    open = OpenDescriptors(daemon.pid());
    if (reserved == 0 && open == descriptors) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "after 5 s the daemon still reserves " << reserved << " bytes and has " << open
                << " descriptors open, " << descriptors << " before";
}

TEST(PressureTest, AnotherProcesssCachedLeasesAreReturnedForAnAllocation) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=128MiB"});
  // 96 MiB of free cached leases (four of 24 MiB) and a split small lease.
  std::unique_ptr<Child> cache = StartCache(daemon, 24, 4, 0);
  EXPECT_EQ(ChildStats(*cache), std::make_pair(int64_t{98} * kMiB, int64_t{204800}));
  std::unique_ptr<Client> client = LocalClient(daemon);
  ASSERT_NE(client, nullptr);
  // 48 MiB do not fit the 30 MiB left, but do once the child's cache is back.
  const Clock::time_point start = Clock::now();
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client, 48 * kMiB, kDevice);
  const double seconds = SecondsSince(start);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::printf("pressure release: granted in %.1f ms\n", seconds * 1e3);
  EXPECT_LT(seconds, 0.9) << "the grant waited for the reply timeout (1 s)";
  EXPECT_EQ(ChildStats(*cache), std::make_pair(int64_t{2} * kMiB, int64_t{204800}));
  EXPECT_EQ(Stat(*client, "num_ooms"), 0);
  EXPECT_EQ(Stat(*client, "reserved_bytes.all.current"), int64_t{48} * kMiB);
  cache->WriteLine("exit");
  EXPECT_EQ(cache->Wait(), 0);
}

TEST(PressureTest, AnAllocationByTheDaemonGetsThemToo) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=128MiB"});
  std::unique_ptr<Child> cache = StartCache(daemon, 24, 4, 0);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(daemon.address(), {.allocation = AllocationMode::kDaemon});
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*(*client), 48 * kMiB, kDevice);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(ChildStats(*cache), std::make_pair(int64_t{2} * kMiB, int64_t{204800}));
  EXPECT_EQ(Stat(**client, "num_ooms"), 0);
  // What no cache can relieve is refused, once counted.
  absl::StatusOr<DeviceBuffer> too_much = memory::Allocate(*(*client), 100 * kMiB, kDevice);
  EXPECT_TRUE(absl::IsResourceExhausted(too_much.status())) << too_much.status();
  EXPECT_EQ(Stat(**client, "num_ooms"), 1);
}

TEST(PressureTest, EmptyCacheOfAllSessionsEmptiesLocalCachesToo) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=1GiB"});
  std::unique_ptr<Child> cache = StartCache(daemon, 24, 4, 1);
  absl::StatusOr<std::unique_ptr<Client>> operator_client = Client::Connect(daemon.address());
  ASSERT_TRUE(operator_client.ok()) << operator_client.status();
  absl::StatusOr<ReleasedCache> released =
      memory::EmptyCache(*(*operator_client), {.device = kDevice, .all_sessions = true});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->released_bytes, 72 * kMiB);
  EXPECT_EQ(released->released_segments, 3u);
  // The kept 24 MiB block and the small lease with its two blocks stay.
  EXPECT_EQ(ChildStats(*cache), std::make_pair(int64_t{26} * kMiB, 24 * kMiB + 204800));
}

TEST(PressureTest, AStoppedClientDelaysTheRequesterByTheReplyTimeoutOnly) {
  DaemonProcess daemon(
      {"--host-devices=1", "--host-device-memory=128MiB", "--client-reply-timeout=500ms"});
  std::unique_ptr<Child> cache = StartCache(daemon, 24, 4, 0);
  std::unique_ptr<Client> client = LocalClient(daemon);
  ASSERT_NE(client, nullptr);
  Stop(cache->pid());
  Clock::time_point start = Clock::now();
  absl::StatusOr<DeviceBuffer> refused = memory::Allocate(*client, 48 * kMiB, kDevice);
  double seconds = SecondsSince(start);
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(), "CUDA out of memory. Tried to allocate"))
      << refused.status();
  EXPECT_GE(seconds, 0.45);
  EXPECT_LT(seconds, 3.0);
  EXPECT_EQ(Stat(*client, "num_ooms"), 1);

  // Another process's snapshot does not hang either: the stopped client's
  // leases are there, marked. It is not even asked: it let the pressure
  // question pass its deadline.
  Observer observer(daemon.address());
  const SessionId stopped = SessionNamed(observer, "cache");
  start = Clock::now();
  absl::StatusOr<std::vector<SegmentInfo>> segments = observer.MemorySnapshot(kDevice, stopped);
  seconds = SecondsSince(start);
  ASSERT_TRUE(segments.ok()) << segments.status();
  EXPECT_LT(seconds, 3.0);
  ASSERT_EQ(segments->size(), 5u);  // four large leases and the small one
  for (const SegmentInfo& segment : *segments) {
    EXPECT_TRUE(segment.leased);
    EXPECT_TRUE(segment.blocks_unavailable);
    // One block of unknown state spans it, for PyTorch's tools.
    ASSERT_EQ(segment.blocks.size(), 1u);
    EXPECT_EQ(segment.blocks[0].state, "unknown");
    EXPECT_EQ(segment.blocks[0].address, segment.address);
    EXPECT_EQ(segment.blocks[0].size, segment.total_size);
    EXPECT_EQ(segment.allocated_size, 0u);
    EXPECT_EQ(segment.blocks_unavailable_reason,
              absl::StrCat("blocks unavailable: session ", stopped.value(),
                           "'s client was not asked: it let an earlier question pass its deadline "
                           "and has answered nothing since"));
  }

  // Woken, the client answers late: its cache comes back all the same.
  ASSERT_EQ(kill(cache->pid(), SIGCONT), 0);
  start = Clock::now();
  absl::StatusOr<DeviceBuffer> granted;
  do {
    granted = memory::Allocate(*client, 48 * kMiB, kDevice);
  } while (!granted.ok() && SecondsSince(start) < 5);
  EXPECT_TRUE(granted.ok()) << granted.status();
  EXPECT_EQ(ChildStats(*cache).first, int64_t{2} * kMiB);
}

TEST(SnapshotOfLocalMemoryTest, AnotherProcessSeesTheBlocksOfLocalLeases) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=1GiB"});
  // Three 6 MiB blocks share a 20 MiB lease; two are freed again.
  std::unique_ptr<Child> cache = StartCache(daemon, 6, 3, 1);
  cache->WriteLine("snapshot");
  std::set<std::string> own;
  for (std::string line = cache->ReadLine(); line != "end" && !line.empty();
       line = cache->ReadLine()) {
    own.insert(line);
  }
  ASSERT_EQ(own.size(), 2u) << absl::StrJoin(own, "\n");
  Observer observer(daemon.address());
  const SessionId session = SessionNamed(observer, "cache");
  for (std::optional<SessionId> of :
       {std::optional<SessionId>(session), std::optional<SessionId>()}) {
    absl::StatusOr<std::vector<SegmentInfo>> segments = observer.MemorySnapshot(kDevice, of);
    ASSERT_TRUE(segments.ok()) << segments.status();
    std::set<std::string> seen;
    uint64_t allocated = 0;
    for (const SegmentInfo& segment : *segments) {
      EXPECT_TRUE(segment.leased);
      EXPECT_FALSE(segment.blocks_unavailable) << segment.blocks_unavailable_reason;
      EXPECT_EQ(segment.session_id, session);
      std::string line = absl::StrCat(segment.address);
      for (const BlockInfo& block : segment.blocks) {
        absl::StrAppend(&line, " ", block.address, ":", block.size, ":", block.requested_size, ":",
                        block.state);
        EXPECT_EQ(block.session_id, block.state == "inactive" ? SessionId(0) : session);
      }
      seen.insert(line);
      allocated += segment.allocated_size;
    }
    EXPECT_EQ(seen, own);
    EXPECT_EQ(allocated, static_cast<uint64_t>(2 * 102400 + 6 * kMiB));
  }
  cache->WriteLine("exit");
  EXPECT_EQ(cache->Wait(), 0);
}

TEST(SigkillTest, AClientKilledMidPressureOrMidSnapshotLeavesNothing) {
  // A long reply timeout: the requester must be released by the death, not
  // by the clock.
  DaemonProcess daemon(
      {"--host-devices=1", "--host-device-memory=128MiB", "--client-reply-timeout=20s"});
  Observer observer(daemon.address());
  ASSERT_TRUE(observer.ListSessions().ok());
  const int descriptors = OpenDescriptors(daemon.pid());
  {
    std::unique_ptr<Client> client = LocalClient(daemon);
    ASSERT_NE(client, nullptr);
    std::unique_ptr<Child> cache = StartCache(daemon, 24, 4, 0);
    Stop(cache->pid());
    const Clock::time_point start = Clock::now();
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      kill(cache->pid(), SIGKILL);
    });
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client, 48 * kMiB, kDevice);
    killer.join();
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_LT(SecondsSince(start), 5.0);
    EXPECT_EQ(cache->Wait(), 128 + SIGKILL);

    std::unique_ptr<Child> second = StartCache(daemon, 6, 3, 1);
    Stop(second->pid());
    const SessionId session = SessionNamed(observer, "cache");
    std::thread second_killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      kill(second->pid(), SIGKILL);
    });
    const Clock::time_point snapshot_start = Clock::now();
    absl::StatusOr<std::vector<SegmentInfo>> segments = observer.MemorySnapshot(kDevice, session);
    second_killer.join();
    EXPECT_LT(SecondsSince(snapshot_start), 5.0);
    // Killed before the daemon looked again: the session is gone.
    EXPECT_TRUE(absl::IsNotFound(segments.status())) << segments.status();
    EXPECT_EQ(second->Wait(), 128 + SIGKILL);
  }
  ExpectNothingLeft(daemon, observer, descriptors);
}

TEST(SigkillTest, ClientsKilledWhileAllocatingLocallyLeaveNothing) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=1GiB"});
  Observer observer(daemon.address());
  ASSERT_TRUE(observer.ListSessions().ok());
  const int descriptors = OpenDescriptors(daemon.pid());
  // tenant-churn allocates through the default mode: local here.
  const char* mode = std::getenv("GPUMUX_ALLOCATION");
  const std::string saved = mode == nullptr ? "" : mode;
  setenv("GPUMUX_ALLOCATION", "local", 1);
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < 6; ++i) {
    children.push_back(std::make_unique<Child>(
        std::vector<std::string>{"tenant-churn", daemon.address(), "churn", "1000000000"}));
  }
  if (mode == nullptr) {
    unsetenv("GPUMUX_ALLOCATION");
  } else {
    setenv("GPUMUX_ALLOCATION", saved.c_str(), 1);
  }
  // Each killed at its own moment of its churn.
  for (size_t i = 0; i < children.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 40 * i));
    kill(children[i]->pid(), SIGKILL);
  }
  for (auto& child : children) EXPECT_EQ(child->Wait(), 128 + SIGKILL);
  ExpectNothingLeft(daemon, observer, descriptors);
}

}  // namespace
}  // namespace gpumux::testing
