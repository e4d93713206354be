#include "common/formats/memory_stats.h"

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

// The strings of a flat JSON array of strings (the keys file holds nothing else).
std::vector<std::string> ReadJsonStrings(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string> out;
  for (size_t open = text.find('"'); open != std::string::npos; open = text.find('"', open + 1)) {
    const size_t close = text.find('"', open + 1);
    if (close == std::string::npos) break;
    out.push_back(text.substr(open + 1, close - open - 1));
    open = close;
  }
  return out;
}

TEST(MemoryStatsTest, KeysAreTorchMemoryStatsKeys) {
  const std::vector<std::string> torch_keys =
      ReadJsonStrings(GPUMUX_SOURCE_DIR "/testdata/torch_memory_stats_keys.json");
  ASSERT_EQ(torch_keys.size(), 122u);
  EXPECT_EQ(MemoryStatsKeys(), torch_keys);
  std::vector<std::string> flattened;
  for (const auto& [key, value] : FlattenMemoryStats(DeviceStats{})) flattened.push_back(key);
  EXPECT_EQ(flattened, torch_keys);
}

TEST(MemoryStatsTest, FlattenReportsEachField) {
  DeviceStats stats;
  stats.allocated_bytes[kLargePool] = Stat{.current = 1, .peak = 2, .allocated = 3, .freed = 4};
  stats.segment[kSmallPool].current = 5;
  stats.requested_bytes[kAggregate].peak = 6;
  stats.oversize_segments.freed = 7;
  stats.num_alloc_retries = 8;
  stats.num_ooms = 9;
  stats.num_sync_all_streams = 10;
  stats.num_device_alloc = 11;
  stats.num_device_free = 12;
  std::map<std::string, int64_t> flat;
  for (const auto& [key, value] : FlattenMemoryStats(stats)) flat[key] = value;
  EXPECT_EQ(flat["allocated_bytes.large_pool.current"], 1);
  EXPECT_EQ(flat["allocated_bytes.large_pool.peak"], 2);
  EXPECT_EQ(flat["allocated_bytes.large_pool.allocated"], 3);
  EXPECT_EQ(flat["allocated_bytes.large_pool.freed"], 4);
  EXPECT_EQ(flat["allocated_bytes.small_pool.current"], 0);
  EXPECT_EQ(flat["segment.small_pool.current"], 5);
  EXPECT_EQ(flat["requested_bytes.all.peak"], 6);
  EXPECT_EQ(flat["oversize_segments.freed"], 7);
  EXPECT_EQ(flat["num_alloc_retries"], 8);
  EXPECT_EQ(flat["num_ooms"], 9);
  EXPECT_EQ(flat["num_sync_all_streams"], 10);
  EXPECT_EQ(flat["num_device_alloc"], 11);
  EXPECT_EQ(flat["num_device_free"], 12);
  // PyTorch reports the unlimited default (SIZE_MAX as int64) as -1.
  EXPECT_EQ(flat["max_split_size"], -1);
  EXPECT_EQ(flat.size(), 122u);
}

TEST(StatTest, IncreaseAndDecreaseFollowC10) {
  Stat stat;
  stat.Increase(100);
  stat.Increase(50);
  stat.Decrease(120);
  stat.Increase(10);
  EXPECT_EQ(stat.current, 40);
  EXPECT_EQ(stat.peak, 150);  // peaks only on increase, never lowered by decrease
  EXPECT_EQ(stat.allocated, 160);
  EXPECT_EQ(stat.freed, 120);
  stat.Increase(200);
  EXPECT_EQ(stat.peak, 240);
}

TEST(StatTest, ResetsKeepWhatTorchKeeps) {
  Stat stat;
  stat.Increase(100);
  stat.Decrease(60);
  stat.ResetAccumulated();
  EXPECT_EQ(stat.current, 40);
  EXPECT_EQ(stat.peak, 100);
  EXPECT_EQ(stat.allocated, 0);
  EXPECT_EQ(stat.freed, 0);
  stat.ResetPeak();
  EXPECT_EQ(stat.current, 40);
  EXPECT_EQ(stat.peak, 40);
  stat.Decrease(40);
  EXPECT_EQ(stat.peak, 40);
  EXPECT_EQ(stat.freed, 40);
}

DeviceStats BusyStats() {
  DeviceStats stats;
  for (StatArray* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                           &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                           &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (Stat& stat : *array) {
      stat.Increase(30);
      stat.Decrease(20);
    }
  }
  for (Stat* stat : {&stats.oversize_allocations, &stats.oversize_segments}) {
    stat->Increase(30);
    stat->Decrease(20);
  }
  stats.num_alloc_retries = 1;
  stats.num_ooms = 2;
  stats.num_sync_all_streams = 3;
  stats.num_device_alloc = 4;
  stats.num_device_free = 5;
  stats.max_split_size = 1 << 20;
  return stats;
}

TEST(DeviceStatsTest, ResetAccumulatedClearsTotalsAndCounters) {
  DeviceStats stats = BusyStats();
  stats.ResetAccumulated();
  for (const auto& [key, value] : FlattenMemoryStats(stats)) {
    if (key == "max_split_size") {
      EXPECT_EQ(value, 1 << 20) << key;  // a setting, not a statistic
    } else if (key.ends_with(".current")) {
      EXPECT_EQ(value, 10) << key;
    } else if (key.ends_with(".peak")) {
      EXPECT_EQ(value, 30) << key;
    } else {
      EXPECT_EQ(value, 0) << key;
    }
  }
}

TEST(DeviceStatsTest, ResetPeakLowersEveryPeakToCurrent) {
  DeviceStats stats = BusyStats();
  stats.ResetPeak();
  for (const auto& [key, value] : FlattenMemoryStats(stats)) {
    if (key.ends_with(".peak") || key.ends_with(".current")) {
      EXPECT_EQ(value, 10) << key;
    } else if (key.ends_with(".allocated")) {
      EXPECT_EQ(value, 30) << key;
    } else if (key.ends_with(".freed")) {
      EXPECT_EQ(value, 20) << key;
    }
  }
  EXPECT_EQ(stats.num_ooms, 2);
  EXPECT_EQ(stats.num_device_free, 5);
}

// A local allocator's figures after it allocated `blocks` blocks of 1 MiB
// in the large pool of a lease of `reserved` bytes.
DeviceStats Allocated(int64_t blocks, int64_t reserved) {
  DeviceStats stats;
  for (StatType type : {kAggregate, kLargePool}) {
    for (int64_t i = 0; i < blocks; ++i) {
      stats.allocation[type].Increase(1);
      stats.active[type].Increase(1);
      stats.allocated_bytes[type].Increase(1 << 20);
      stats.active_bytes[type].Increase(1 << 20);
      stats.requested_bytes[type].Increase(1 << 20);
    }
    stats.segment[type].Increase(1);
    stats.reserved_bytes[type].Increase(reserved);
  }
  return stats;
}

TEST(PlausibleLocalStatsTest, TakesWhatAnAllocatorPublishes) {
  EXPECT_TRUE(PlausibleLocalStats(DeviceStats{}, 0));
  DeviceStats stats = Allocated(4, 20 << 20);
  EXPECT_TRUE(PlausibleLocalStats(stats, 20 << 20));
  stats.ResetAccumulated();
  EXPECT_TRUE(PlausibleLocalStats(stats, 20 << 20));
  stats.ResetPeak();
  EXPECT_TRUE(PlausibleLocalStats(stats, 20 << 20));
  stats.num_ooms = kMaxLocalFigure;
  EXPECT_TRUE(PlausibleLocalStats(stats, 20 << 20));
}

// What an attack published, each refused: figures that would have moved the
// device's (and other sessions') figures beyond the session's own leases.
TEST(PlausibleLocalStatsTest, RefusesFiguresNoAllocatorHas) {
  const int64_t reserved = 20 << 20;
  auto refused = [&](auto lie) {
    DeviceStats stats = Allocated(4, reserved);
    lie(stats);
    return !PlausibleLocalStats(stats, reserved);
  };
  EXPECT_TRUE(refused([](DeviceStats& s) { s.num_ooms = INT64_MAX; }));
  EXPECT_TRUE(refused([](DeviceStats& s) { s.num_alloc_retries = -1; }));
  EXPECT_TRUE(refused([](DeviceStats& s) { s.allocation[kAggregate].allocated = INT64_MAX; }));
  // 10^15 blocks in 4 MiB.
  EXPECT_TRUE(refused([](DeviceStats& s) {
    for (StatType t : {kAggregate, kLargePool}) {
      s.allocation[t].current = s.allocation[t].peak = 1'000'000'000'000'000;
    }
  }));
  // 10^18 bytes in the large pool, 4 MiB in all.
  EXPECT_TRUE(refused([](DeviceStats& s) {
    s.allocated_bytes[kLargePool].current = s.allocated_bytes[kLargePool].peak =
        1'000'000'000'000'000'000;
  }));
  // Pools that do not add up, in each of current, allocated, freed, peak.
  EXPECT_TRUE(refused([](DeviceStats& s) { s.active[kSmallPool].Increase(1); }));
  EXPECT_TRUE(refused([](DeviceStats& s) { s.requested_bytes[kAggregate].freed += 512; }));
  EXPECT_TRUE(refused([](DeviceStats& s) { s.allocated_bytes[kAggregate].peak = 1 << 30; }));
  EXPECT_TRUE(refused([](DeviceStats& s) { s.inactive_split_bytes[kAggregate].current = 1; }));
  EXPECT_TRUE(refused([](DeviceStats& s) {
    for (StatType t : {kAggregate, kLargePool}) s.inactive_split_bytes[t].Increase(21 << 20);
  }));
  EXPECT_TRUE(refused([](DeviceStats& s) { s.oversize_allocations.current = 1; }));
}

TEST(MergeLocalStatsTest, SumsSaturate) {
  DeviceStats daemon;
  daemon.num_ooms = INT64_MAX - 1;
  daemon.allocation[kAggregate].allocated = INT64_MAX;
  DeviceStats local;
  local.num_ooms = 5;
  local.allocation[kAggregate].allocated = 1;
  const DeviceStats merged = MergeLocalStats(daemon, local);
  EXPECT_EQ(merged.num_ooms, INT64_MAX);
  EXPECT_EQ(merged.allocation[kAggregate].allocated, INT64_MAX);
  EXPECT_EQ(SaturatingAdd(1, 2), 3);
}

TEST(RetiredLocalStatsTest, KeepsCountersAndCountsWhatWasHeldAsFreed) {
  DeviceStats stats = Allocated(3, 20 << 20);
  stats.num_ooms = 2;
  const DeviceStats retired = RetiredLocalStats(stats);
  EXPECT_EQ(retired.num_ooms, 2);
  EXPECT_EQ(retired.allocation[kAggregate].current, 0);
  EXPECT_EQ(retired.allocation[kAggregate].peak, 0);
  EXPECT_EQ(retired.allocation[kAggregate].allocated, 3);
  EXPECT_EQ(retired.allocation[kAggregate].freed, 3);
  EXPECT_EQ(retired.allocated_bytes[kLargePool].freed, 3 << 20);
}

}  // namespace
}  // namespace gpumux
