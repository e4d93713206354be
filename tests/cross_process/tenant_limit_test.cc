// The HAMi-core#273 race, which gpumux must not have: eight processes of one
// tenant allocate and free concurrently against a daemon started with
// --tenant-memory-limit, while this process polls the tenant's usage (the
// admin socket) and the device's reserved bytes (Observe). Neither may ever
// pass the limit, and some allocations must be refused, or the limit was
// never tested.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/admin.h"
#include "gpumux/observer.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

constexpr uint64_t kLimit = uint64_t{64} << 20;
constexpr int kProcesses = 8;

TEST(TenantLimitTest, ProcessesOfOneTenantNeverTogetherPassItsLimit) {
  DaemonProcess daemon(
      {"--host-devices=1", "--host-device-memory=1GiB", "--tenant-memory-limit=pod-a=64MiB"});
  Admin admin(daemon.address());
  Observer observer(daemon.address());
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(std::make_unique<Child>(
        std::vector<std::string>{"tenant-churn", daemon.address(), "pod-a", "150"}));
  }
  // Poll until every child has said how it did (its one line comes at its end).
  uint64_t polls = 0, peak_tenant = 0, peak_device = 0;
  size_t sessions_seen = 0;
  std::vector<std::string> reports(kProcesses);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    for (int i = 0; i < kProcesses; ++i) reports[i] = children[i]->ReadLine();
    done = true;
  });
  while (!done) {
    absl::StatusOr<std::vector<TenantInfo>> tenants = admin.ListTenants();
    if (!tenants.ok()) {
      ADD_FAILURE() << tenants.status();
      break;
    }
    for (const TenantInfo& tenant : *tenants) {
      if (tenant.tenant != "pod-a") continue;
      if (tenant.devices.size() != 1) {
        ADD_FAILURE() << tenant.devices.size() << " devices";
        continue;
      }
      const TenantDeviceUsage& usage = tenant.devices[0];
      EXPECT_EQ(usage.limit_bytes, kLimit);
      EXPECT_LE(usage.reserved_bytes, kLimit);
      peak_tenant = std::max(peak_tenant, usage.reserved_bytes);
      sessions_seen = std::max(sessions_seen, usage.sessions.size());
    }
    // An independent figure: only pod-a allocates, so the whole device's
    // reserved bytes are its.
    absl::StatusOr<std::map<std::string, int64_t>> stats = observer.MemoryStats(DeviceIndex(0));
    if (!stats.ok()) {
      ADD_FAILURE() << stats.status();
      break;
    }
    const auto reserved = static_cast<uint64_t>(stats->at("reserved_bytes.all.current"));
    EXPECT_LE(reserved, kLimit);
    peak_device = std::max(peak_device, reserved);
    ++polls;
  }
  reader.join();
  uint64_t refused = 0;
  for (int i = 0; i < kProcesses; ++i) {
    EXPECT_EQ(children[i]->Wait(), 0) << "child " << i;
    unsigned long long n = 0, of = 0;
    ASSERT_EQ(std::sscanf(reports[i].c_str(), "refused %llu of %llu", &n, &of), 2) << reports[i];
    EXPECT_EQ(of, 150u);
    refused += n;
  }
  EXPECT_GT(refused, 0u) << "no allocation was refused: the limit was never reached";
  EXPECT_GT(polls, 10u);
  EXPECT_GT(sessions_seen, 1u) << "the children's sessions never overlapped";
  EXPECT_LE(peak_tenant, kLimit);
  EXPECT_GT(peak_tenant, kLimit / 2);
  EXPECT_LE(peak_device, kLimit);
  // The children are gone: so is their memory, and the limit stays for the
  // tenant's next sessions.
  absl::StatusOr<std::vector<TenantInfo>> after = admin.ListTenants();
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].tenant, "pod-a");
  EXPECT_EQ((*after)[0].devices[0].limit_bytes, kLimit);
  EXPECT_EQ((*after)[0].devices[0].reserved_bytes, 0u);
  EXPECT_TRUE((*after)[0].devices[0].sessions.empty());
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
}  // namespace gpumux::testing
