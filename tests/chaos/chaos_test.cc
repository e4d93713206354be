// The chaos test: N real client processes (gpumux_chaos_client) run random
// mixes of every operation against a real gpumuxd child process, and one of
// them is SIGKILLed at random every fraction of a second and replaced. Each
// kill's session must be reclaimed promptly; at the end no session, no
// allocated or reserved byte, no shared-memory object and no file descriptor
// of the clients is left, and the daemon's RSS and thread count are back near
// where they started. GPUMUX_CHAOS_KILLS (default 50) and
// GPUMUX_CHAOS_CLIENTS (default 6) size the run (scripts/chaos.sh runs 1,000
// kills); it prints name=value figures.

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/support/process_figures.h"
#include "tests/support/raw_session.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {
namespace {

const std::string kChaosClient =
    TestBinary(std::string(GPUMUX_BINARY_DIR) + "/tests/chaos/gpumux_chaos_client");

int EnvOr(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// Memory files (segments, staging buffers, interprocess events) the process
// `pid` holds open: descriptors linking to "/memfd:...".
int MemoryFilesOf(pid_t pid) {
  const std::string dir_path = "/proc/" + std::to_string(pid) + "/fd";
  int count = 0;
  if (DIR* dir = opendir(dir_path.c_str())) {
    while (dirent* entry = readdir(dir)) {
      char target[256];
      const std::string link = dir_path + "/" + entry->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n > 0) count += std::string(target, static_cast<size_t>(n)).rfind("/memfd:", 0) == 0;
    }
    closedir(dir);
  }
  return count;
}

// ASan's shadow memory and quarantine grow RSS without a leak.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAddressSanitizer = true;
#else
constexpr bool kUnderAddressSanitizer = false;
#endif
#else
constexpr bool kUnderAddressSanitizer = false;
#endif

class Observer {
 public:
  explicit Observer(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Observe::NewStub(channel)) {}
  std::vector<v1::SessionInfo> Sessions() {
    grpc::ClientContext context;
    v1::ListSessionsResponse response;
    EXPECT_TRUE(stub_->ListSessions(&context, v1::ListSessionsRequest(), &response).ok());
    return {response.sessions().begin(), response.sessions().end()};
  }
  bool HasSessionOf(pid_t pid) {
    for (const v1::SessionInfo& s : Sessions()) {
      if (s.pid() == pid) return true;
    }
    return false;
  }
  int64_t DeviceStat(int device, const std::string& key) {
    grpc::ClientContext context;
    v1::ObserveStatsRequest request;
    request.set_device(device);
    v1::MemoryStats stats;
    EXPECT_TRUE(stub_->GetMemoryStats(&context, request, &stats).ok());
    return stats.values().at(key);
  }

 private:
  std::unique_ptr<v1::Observe::Stub> stub_;
};

TEST(ChaosTest, KilledClientsLeaveNothingBehind) {
  const int kills = EnvOr("GPUMUX_CHAOS_KILLS", 50);
  const int clients = EnvOr("GPUMUX_CHAOS_CLIENTS", 6);
  DaemonProcess daemon({"--host-devices=2", "--host-device-memory=256MiB", "--log-level=warn"});
  Observer observe(daemon.channel());
  ASSERT_TRUE(observe.Sessions().empty());
  // Warm: one client's first use starts what the daemon keeps (pool
  // threads, gRPC's), so the baseline is a serving daemon, not an idle one.
  {
    auto warm =
        std::make_unique<Child>(kChaosClient, std::vector<std::string>{daemon.address(), "1"});
    ASSERT_EQ(warm->ReadLine(), "ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const auto settle = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!observe.Sessions().empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  settle();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const ProcessFigures before = ReadProcessFigures(daemon.pid());

  std::mt19937 rng(12345);
  uint64_t next_seed = 100;
  std::vector<std::unique_ptr<Child>> running;
  auto spawn = [&] {
    running.push_back(std::make_unique<Child>(
        kChaosClient, std::vector<std::string>{daemon.address(), std::to_string(next_seed++)}));
    EXPECT_EQ(running.back()->ReadLine(), "ready");
  };
  for (int i = 0; i < clients; ++i) spawn();

  std::vector<double> reclaim_ms;
  int slow = 0;
  for (int k = 0; k < kills; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 200));
    const size_t victim = rng() % running.size();
    const pid_t pid = running[victim]->pid();
    const auto killed_at = std::chrono::steady_clock::now();
    running.erase(running.begin() + static_cast<long>(victim));  // SIGKILL and reap
    while (observe.HasSessionOf(pid) &&
           std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(5)) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed_at)
            .count();
    reclaim_ms.push_back(ms);
    slow += ms > 1000;
    ASSERT_FALSE(observe.HasSessionOf(pid))
        << "kill " << k << ": the killed client's session is still open";
    spawn();
  }
  running.clear();
  settle();

  const std::vector<v1::SessionInfo> left = observe.Sessions();
  EXPECT_TRUE(left.empty()) << left.size() << " sessions left";
  // A killed client's segments go back once the work it had queued ran
  // (frees wait on it, as PyTorch's do): give the streams time to drain.
  const auto reserved = [&] {
    return observe.DeviceStat(0, "reserved_bytes.all.current") +
           observe.DeviceStat(1, "reserved_bytes.all.current");
  };
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       reserved() != 0 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(observe.DeviceStat(d, "allocated_bytes.all.current"), 0) << "device " << d;
    EXPECT_EQ(observe.DeviceStat(d, "reserved_bytes.all.current"), 0) << "device " << d;
  }
  // Idle blocking-call threads leave after 2 s.
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(6);
       ReadProcessFigures(daemon.pid()).threads > before.threads &&
       std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int memory_files_left = MemoryFilesOf(daemon.pid());
  EXPECT_EQ(memory_files_left, 0) << "memory files the daemon still holds";
  const ProcessFigures after = ReadProcessFigures(daemon.pid());
  EXPECT_LE(after.fds, before.fds + 2)
      << "file descriptors: " << before.fds << " before, " << after.fds << " after";
  EXPECT_LE(after.threads, before.threads + 4)
      << "threads: " << before.threads << " before, " << after.threads << " after";
  if (!kUnderAddressSanitizer) {
    EXPECT_LE(after.rss_kb, before.rss_kb + 64 * 1024)
        << "RSS: " << before.rss_kb << " kB before, " << after.rss_kb << " kB after";
  }
  EXPECT_EQ(slow, 0) << "kills reclaimed in more than 1 s";

  std::printf(
      "chaos_kills=%d\nchaos_clients=%d\nchaos_reclaim_p50_ms=%.2f\nchaos_reclaim_p99_ms=%.2f\n"
      "chaos_reclaim_max_ms=%.2f\nchaos_sessions_left=%zu\nchaos_memory_files_left=%d\n"
      "chaos_fds_before=%lld\nchaos_fds_after=%lld\nchaos_threads_before=%lld\nchaos_threads_after="
      "%lld\n"
      "chaos_rss_kb_before=%lld\nchaos_rss_kb_after=%lld\n",
      kills, clients, Percentile(reclaim_ms, 0.5), Percentile(reclaim_ms, 0.99),
      Percentile(reclaim_ms, 1.0), left.size(), memory_files_left,
      static_cast<long long>(before.fds), static_cast<long long>(after.fds),
      static_cast<long long>(before.threads), static_cast<long long>(after.threads),
      static_cast<long long>(before.rss_kb), static_cast<long long>(after.rss_kb));
  EXPECT_EQ(daemon.Stop(), 0) << "gpumuxd did not exit cleanly";
}

}  // namespace
}  // namespace gpumux::testing
