// torch.cuda.memory_stats() semantics: the 122 keys, reset rules, and the
// invariants of PyTorch's _check_memory_stat_consistency after a randomized
// multi-client workload, device-wide and per client.

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "common/formats/memory_stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

std::vector<std::string> TorchKeys() {
  std::ifstream in(std::string(GPUMUX_SOURCE_DIR) + "/testdata/torch_memory_stats_keys.json");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> keys;
  const std::string s = text.str();
  for (size_t open = s.find('"'); open != std::string::npos; open = s.find('"', open + 1)) {
    const size_t close = s.find('"', open + 1);
    keys.push_back(s.substr(open + 1, close - open - 1));
    open = close;
  }
  return keys;
}

std::vector<std::string> KeysOf(const DeviceStats& stats) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : FlattenMemoryStats(stats)) keys.push_back(key);
  return keys;
}

TEST_F(AllocatorTest, StatsHaveTorchsExact122Keys) {
  const std::vector<std::string> torch = TorchKeys();
  ASSERT_EQ(torch.size(), 122u);
  Free(Alloc(kMiB));
  EXPECT_EQ(KeysOf(Stats()), torch);
  EXPECT_EQ(KeysOf(StatsOf(kA)), torch);
  EXPECT_EQ(KeysOf(StatsOf(kB)), torch);  // never seen: zeros, same keys
  EXPECT_EQ(Stats().max_split_size, -1);
  EXPECT_EQ(StatsOf(kB).max_split_size, -1);
}

TEST_F(AllocatorTest, ResetPeakAndAccumulatedFollowPyTorch) {
  Free(Alloc(10 * kMiB, kA));
  EXPECT_EQ(Stats().allocated_bytes[kAggregate].peak, static_cast<int64_t>(10 * kMiB));

  allocator_->ResetPeakStats(kDev, kA);  // only A's books
  EXPECT_EQ(StatsOf(kA).allocated_bytes[kAggregate].peak, 0);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].peak, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(Stats().allocated_bytes[kAggregate].peak, static_cast<int64_t>(10 * kMiB));
  allocator_->ResetPeakStats(kDev, std::nullopt);
  EXPECT_EQ(Stats().allocated_bytes[kAggregate].peak, 0);
  EXPECT_EQ(Stats().allocated_bytes[kAggregate].allocated, static_cast<int64_t>(10 * kMiB));

  allocator_->ResetAccumulatedStats(kDev, std::nullopt);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.allocated_bytes[kAggregate].allocated, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].freed, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(s.reserved_bytes[kAggregate].peak, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 1);  // A's accumulators untouched
  allocator_->ResetAccumulatedStats(kDev, kA);
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);
  EXPECT_EQ(StatsOf(kA).allocation[kAggregate].allocated, 0);
}

// Random allocs, frees, dedicated blocks, recharges and cache flushes over
// three clients and two streams on a small device where OOMs happen.
// `backend`, given with expandable segments, is asked after each check
// whether every live block's pages are still mapped (no unmapping, GC or
// compact-mode reclaim may take a page under a live block).
void RunRandomWorkload(AllocatorTest& t, CachingAllocator& allocator, uint32_t seed,
                       HostBackend* backend = nullptr) {
  const bool expandable = backend != nullptr;
  std::mt19937_64 rng(seed);
  const ClientId clients[] = {kA, kB, ClientId(3)};
  allocator.SetMemoryLimit(kDev, kB, 96 * kMiB);
  std::vector<AllocationResult> live;
  auto check = [&] {
    const std::vector<SegmentSnapshot> segments = allocator.Snapshot(kDev, std::nullopt);
    ExpectConsistent(allocator.GetStats(kDev), segments, std::nullopt);
    for (ClientId c : clients) ExpectConsistent(allocator.GetClientStats(kDev, c), segments, c);
    if (!expandable) return;
    for (const AllocationResult& r : live) {
      if (r.segment_handle->kind != SegmentHandle::Kind::kHostPages) continue;  // dedicated
      EXPECT_OK(backend->PageHandles(kDev, r.address, r.size));
    }
  };
  auto pick_size = [&]() -> uint64_t {
    switch (rng() % 5) {
      case 0:
      case 1:
        return 1 + rng() % kMiB;
      case 2:
      case 3:
        return kMiB + rng() % (9 * kMiB);
      default:
        return 10 * kMiB + rng() % (30 * kMiB);
    }
  };
  int ooms = 0;
  for (int op = 0; op < 3000; ++op) {
    const uint64_t dice = rng() % 100;
    if (dice < 55 || live.empty()) {
      const ClientId client = clients[rng() % 3];
      const StreamId stream(rng() % 2);
      absl::StatusOr<AllocationResult> r =
          allocator.Allocate(kDev, client, stream, pick_size(), /*dedicated=*/rng() % 20 == 0);
      if (r.ok()) {
        live.push_back(*r);
      } else {
        ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
        ++ooms;
      }
    } else if (dice < 95) {
      const size_t i = rng() % live.size();
      allocator.Free(kDev, live[i].address);
      live[i] = live.back();
      live.pop_back();
    } else if (dice < 98) {
      allocator.Recharge(kDev, live[rng() % live.size()].address, clients[rng() % 3]);
    } else {
      allocator.EmptyCache(kDev,
                           rng() % 2 ? std::optional<ClientId>(clients[rng() % 3]) : std::nullopt);
    }
    if (op % 100 == 0) check();
    if (::testing::Test::HasFailure()) return;
  }
  check();
  EXPECT_GT(ooms, 0) << "the workload should push the device into OOMs";
  for (const AllocationResult& r : live) allocator.Free(kDev, r.address);
  live.clear();
  allocator.EmptyCache(std::nullopt, std::nullopt);
  check();
  const DeviceStats s = allocator.GetStats(kDev);
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, 0);
  // A map call may map several pages and an unmap call take pages of
  // several maps: only whole segments pair one cudaMalloc with one cudaFree.
  if (!expandable) {
    EXPECT_EQ(s.num_device_alloc, s.num_device_free);
  }
  EXPECT_GE(s.num_alloc_retries, s.num_ooms);
  (void)t;
}

TEST_F(AllocatorTest, RandomWorkloadKeepsStatsConsistentWithSnapshot) {
  Init(256 * kMiB);
  RunRandomWorkload(*this, *allocator_, 42);
}

TEST_F(AllocatorTest, RandomWorkloadWithMaxSplitSizeStaysConsistent) {
  Init(256 * kMiB, "max_split_size_mb:24,garbage_collection_threshold:0.7");
  RunRandomWorkload(*this, *allocator_, 7);
}

TEST_F(AllocatorTest, RandomWorkloadWithExpandableSegmentsStaysConsistent) {
  Init(256 * kMiB, "expandable_segments:True");
  RunRandomWorkload(*this, *allocator_, 11, backend_.get());
}

TEST_F(AllocatorTest, RandomWorkloadInCompactModeStaysConsistent) {
  Init(256 * kMiB, "compact_segments:True,garbage_collection_threshold:0.7");
  RunRandomWorkload(*this, *allocator_, 13, backend_.get());
}

}  // namespace
}  // namespace gpumux::testing
