// Tenant limits: one byte cap over the segments of all clients of a tenant on
// a device, checked with each new segment under the device's lock; the
// tenant's cached segments (any of its clients') go before the refusal, other
// tenants are untouched, and the limit changes at run time.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr ClientId kC(3);

class TenantTest : public AllocatorTest {
 protected:
  void SetUp() override {
    AllocatorTest::SetUp();
    allocator_->SetClientTenant(kA, "pod");
    allocator_->SetClientTenant(kB, "pod");
    allocator_->SetClientTenant(kC, "other");
  }
  TenantUsage Usage(const std::string& tenant) const {
    for (const TenantUsage& usage : allocator_->ListTenants(kDev)) {
      if (usage.tenant == tenant) return usage;
    }
    ADD_FAILURE() << "no tenant " << tenant;
    return {};
  }
};

TEST_F(TenantTest, OverTheLimitIsPyTorchsOomTextNamingTheTenant) {
  allocator_->SetTenantLimit(kDev, "pod", 40 * kMiB);
  AllocationResult a = Alloc(12 * kMiB, kA);
  AllocationResult b = Alloc(20 * kMiB, kB);
  absl::StatusOr<AllocationResult> over = allocator_->Allocate(kDev, kA, kS0, 10 * kMiB);
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted,
                             StartsWith("CUDA out of memory. Tried to allocate 10.00 MiB. GPU 0 "
                                        "has a total capacity of 256.00 MiB of which ")));
  EXPECT_THAT(over,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       EndsWith(" This session has 12.00 MiB allocated and 12.00 MiB reserved on "
                                "GPU 0. Its tenant 'pod' has 32.00 MiB reserved on GPU 0 over 2 "
                                "sessions, of its 40.00 MiB limit for all of them together "
                                "(`gpumux tenant-limit` changes it).")));
  EXPECT_EQ(StatsOf(kA).num_ooms, 1);
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 1);
  EXPECT_EQ(StatsOf(kB).num_ooms, 0);
  EXPECT_EQ(Stats().num_ooms, 1);
  // What fits the limit still goes: a small block's 2 MiB segment.
  AllocationResult fits = Alloc(1 * kMiB, kB);
  EXPECT_EQ(Usage("pod").reserved_bytes, 34 * kMiB);
  Free(a);
  Free(b);
  Free(fits);
}

TEST_F(TenantTest, TheTenantsOtherSessionsCachesGoBeforeARefusal) {
  allocator_->SetTenantLimit(kDev, "pod", 40 * kMiB);
  AllocationResult b_cached = Alloc(20 * kMiB, kB);
  Free(b_cached);                             // cached by B
  Free(Alloc(20 * kMiB, kC));                 // cached by another tenant: it stays
  AllocationResult a = Alloc(24 * kMiB, kA);  // 20 + 24 > 40: B's cache goes
  EXPECT_EQ(a.segment_size, 24 * kMiB);
  EXPECT_THAT(released_, ElementsAre(b_cached.segment_id));
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 1);
  EXPECT_EQ(StatsOf(kA).num_ooms, 0);
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kC).reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(Usage("pod").reserved_bytes, 24 * kMiB);
  Free(a);
}

TEST_F(TenantTest, OtherTenantsAndClientsWithoutOneAreUnaffected) {
  allocator_->SetTenantLimit(kDev, "pod", 20 * kMiB);
  AllocationResult a = Alloc(20 * kMiB, kA);
  EXPECT_THAT(allocator_->Allocate(kDev, kB, kS0, 2 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted));
  AllocationResult c = Alloc(100 * kMiB, kC);
  AllocationResult untenanted = Alloc(100 * kMiB, ClientId(9));
  EXPECT_EQ(Usage("other").reserved_bytes, 100 * kMiB);
  EXPECT_EQ(Usage("other").limit_bytes, 0u);
  Free(a);
  Free(c);
  Free(untenanted);
}

TEST_F(TenantTest, LeasesCountAgainstTheTenantsLimit) {
  allocator_->SetTenantLimit(kDev, "pod", 30 * kMiB);
  absl::StatusOr<AllocationResult> first = allocator_->Lease(kDev, kA, kS0, 20 * kMiB, false);
  ASSERT_OK(first);
  EXPECT_THAT(allocator_->Lease(kDev, kB, kS0, 20 * kMiB, false),
              StatusIs(absl::StatusCode::kResourceExhausted, EndsWith("changes it).")));
  EXPECT_EQ(StatsOf(kB).num_ooms, 1);
  allocator_->Free(kDev, first->address);
  EXPECT_OK(allocator_->Lease(kDev, kB, kS0, 20 * kMiB, false));
}

TEST_F(TenantTest, TheLimitChangesAtRunTime) {
  allocator_->SetTenantLimit(std::nullopt, "pod", 20 * kMiB);
  AllocationResult a = Alloc(20 * kMiB, kA);
  EXPECT_THAT(allocator_->Allocate(kDev, kB, kS0, 1 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted));
  allocator_->SetTenantLimit(kDev, "pod", 22 * kMiB);
  AllocationResult small = Alloc(1 * kMiB, kB);  // a 2 MiB segment now fits
  EXPECT_EQ(Usage("pod").limit_bytes, 22 * kMiB);
  // Lowered below what the tenant holds: new segments wait for it to shrink.
  allocator_->SetTenantLimit(kDev, "pod", 10 * kMiB);
  EXPECT_THAT(allocator_->Allocate(kDev, kB, kS0, 4 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted));
  allocator_->SetTenantLimit(kDev, "pod", 0);
  AllocationResult big = Alloc(100 * kMiB, kB);
  EXPECT_EQ(Usage("pod").limit_bytes, 0u);
  EXPECT_EQ(Usage("pod").reserved_bytes, 122 * kMiB);
  Free(a);
  Free(small);
  Free(big);
}

TEST_F(TenantTest, ListTenantsKeepsTheBooksAsClientsComeAndGo) {
  allocator_->SetTenantLimit(kDev, "idle", 1 * kMiB);
  AllocationResult a = Alloc(12 * kMiB, kA);
  AllocationResult b = Alloc(3 * kMiB, kB);
  std::vector<TenantUsage> tenants = allocator_->ListTenants(std::nullopt);
  ASSERT_EQ(tenants.size(), 3u);
  EXPECT_EQ(tenants[0].tenant, "idle");
  EXPECT_EQ(tenants[0].limit_bytes, 1 * kMiB);
  EXPECT_THAT(tenants[0].clients, IsEmpty());
  EXPECT_EQ(tenants[1].tenant, "other");
  EXPECT_EQ(tenants[2].tenant, "pod");
  EXPECT_EQ(tenants[2].reserved_bytes, 32 * kMiB);  // 12 MiB and a 20 MiB segment
  EXPECT_EQ(tenants[2].allocated_bytes, 15 * kMiB);
  EXPECT_THAT(tenants[2].clients, ElementsAre(kA, kB));
  Free(a);
  allocator_->RemoveClient(kA);
  EXPECT_THAT(Usage("pod").clients, ElementsAre(kB));
  EXPECT_EQ(Usage("pod").reserved_bytes, 20 * kMiB);
  // A tenant without a limit goes with its last client; one with a limit stays.
  allocator_->RemoveClient(kC);
  for (const TenantUsage& usage : allocator_->ListTenants(kDev)) EXPECT_NE(usage.tenant, "other");
  allocator_->SetTenantLimit(kDev, "idle", 0);
  for (const TenantUsage& usage : allocator_->ListTenants(kDev)) EXPECT_NE(usage.tenant, "idle");
  // Moving a client to another tenant moves its bytes.
  allocator_->SetClientTenant(kB, "moved");
  EXPECT_EQ(Usage("moved").reserved_bytes, 20 * kMiB);
  for (const TenantUsage& usage : allocator_->ListTenants(kDev)) EXPECT_NE(usage.tenant, "pod");
  Free(b);
  allocator_->RemoveClient(kB);
  EXPECT_THAT(allocator_->ListTenants(kDev), IsEmpty());
}

TEST_F(TenantTest, ConcurrentClientsOfOneTenantNeverPassItsLimit) {
  constexpr uint64_t kLimit = 64 * kMiB;
  allocator_->SetTenantLimit(kDev, "pod", kLimit);
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    const ClientId client(100 + t);
    allocator_->SetClientTenant(client, "pod");
    threads.emplace_back([&, client, t] {
      for (int i = 0; i < 300; ++i) {
        // 12-24 MiB: each is a new segment of its own size, and four fill the limit.
        const uint64_t size = (12 + 2 * ((i + t) % 7)) * kMiB;
        absl::StatusOr<AllocationResult> r = allocator_->Allocate(kDev, client, kS0, size);
        if (!r.ok()) {
          EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
          refused.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        allocator_->Free(kDev, r->address);
        if (i % 3 == 0) allocator_->EmptyCache(kDev, client);
      }
    });
  }
  std::thread watcher([&] {
    while (!stop.load()) {
      EXPECT_LE(Usage("pod").reserved_bytes, kLimit);
      EXPECT_LE(static_cast<uint64_t>(Stats().reserved_bytes[kAggregate].current), kLimit);
    }
  });
  for (std::thread& t : threads) t.join();
  stop = true;
  watcher.join();
  EXPECT_GT(refused.load(), 0);
  int64_t ooms = 0;
  for (int t = 0; t < 8; ++t) ooms += StatsOf(ClientId(100 + t)).num_ooms;
  EXPECT_EQ(ooms, refused.load());
}

}  // namespace
}  // namespace gpumux::testing
