#pragma once

// PyTorch's allocator statistics (c10 DeviceStats): the same fields, update
// rules and reset semantics, and the exact 122 flattened key names that
// torch.cuda.memory_stats() returns. Plain data, not thread-safe.

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpumux {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void Increase(int64_t amount) {
    current += amount;
    if (current > peak) peak = current;
    allocated += amount;
  }
  void Decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void ResetAccumulated() { allocated = freed = 0; }
  void ResetPeak() { peak = current; }
};

// Index into a StatArray: "all", "small_pool", "large_pool".
enum StatType : int { kAggregate = 0, kSmallPool = 1, kLargePool = 2 };
using StatArray = std::array<Stat, 3>;

struct DeviceStats {
  StatArray allocation;      // blocks handed to clients
  StatArray segment;         // segments obtained from the backend
  StatArray active;          // allocated or waiting on stream events
  StatArray inactive_split;  // free blocks inside split segments
  StatArray allocated_bytes;
  StatArray reserved_bytes;
  StatArray active_bytes;
  StatArray inactive_split_bytes;
  StatArray requested_bytes;  // unrounded sizes asked for
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  Stat oversize_allocations;
  Stat oversize_segments;
  int64_t num_sync_all_streams = 0;
  int64_t num_device_alloc = 0;
  int64_t num_device_free = 0;
  // Bytes; -1 when unlimited, as PyTorch reports SIZE_MAX.
  int64_t max_split_size = -1;

  // torch.cuda.reset_accumulated_memory_stats: allocated/freed and counters to 0.
  void ResetAccumulated();
  // torch.cuda.reset_peak_memory_stats: peak = current.
  void ResetPeak();
};

// The 122 (key, value) pairs of torch.cuda.memory_stats(), sorted by key.
std::vector<std::pair<std::string, int64_t>> FlattenMemoryStats(const DeviceStats& stats);

// A session's stats under local allocation: the segment-level figures
// (segment, reserved_bytes, oversize_segments, num_device_alloc/free,
// max_split_size) are the daemon's, which leases and shareable allocations
// both count in; every other figure is the daemon's plus the client's own
// allocator's (`local`). A peak of the sum is at most the sum of the peaks,
// so the summed peaks are exact while one side is idle. Sums saturate at
// INT64_MAX.
DeviceStats MergeLocalStats(const DeviceStats& daemon, const DeviceStats& local);

// The largest figure a client may publish: 2^53 (no allocator counts that
// many allocations or bytes).
inline constexpr int64_t kMaxLocalFigure = int64_t{1} << 53;

// Whether `stats` could be a real allocator's figures for a session the
// daemon knows `reserved` bytes of segments of: every figure in
// [0, kMaxLocalFigure]; no current above its peak; each stat's `all` the sum
// of its two pools (current, allocated, freed; its peak between the larger
// pool's and their sum); no more allocated, active, requested or
// inactive-split bytes than reserved; no more blocks than those bytes hold
// (512 bytes at least each). Judges what a client publishes
// (common/ipc/stats_page.h).
bool PlausibleLocalStats(const DeviceStats& stats, int64_t reserved);

// Calls `visit(field)` on each figure of a session's local stats that
// MergeLocalStats adds and that only grows until the client resets it: the
// allocated and freed counts of every merged stat, num_alloc_retries,
// num_ooms and num_sync_all_streams.
template <typename Visit>
void ForEachLocalCounter(DeviceStats& stats, Visit visit);
// ... and each peak that MergeLocalStats adds.
template <typename Visit>
void ForEachLocalPeak(DeviceStats& stats, Visit visit);

// What an ended session's local figures leave in its device's: its counters
// as they were, nothing current (what it held was reclaimed, so counted as
// freed) and no peak (the device's peaks keep their own floor,
// server/core/stats_pages.h).
DeviceStats RetiredLocalStats(const DeviceStats& local);

// a + b, INT64_MAX where that overflows (figures are never negative).
int64_t SaturatingAdd(int64_t a, int64_t b);

template <typename Visit>
void ForEachLocalCounter(DeviceStats& stats, Visit visit) {
  for (StatArray* array :
       {&stats.allocation, &stats.active, &stats.inactive_split, &stats.allocated_bytes,
        &stats.active_bytes, &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (Stat& stat : *array) {
      visit(stat.allocated);
      visit(stat.freed);
    }
  }
  visit(stats.oversize_allocations.allocated);
  visit(stats.oversize_allocations.freed);
  visit(stats.num_alloc_retries);
  visit(stats.num_ooms);
  visit(stats.num_sync_all_streams);
}

template <typename Visit>
void ForEachLocalPeak(DeviceStats& stats, Visit visit) {
  for (StatArray* array :
       {&stats.allocation, &stats.active, &stats.inactive_split, &stats.allocated_bytes,
        &stats.active_bytes, &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (Stat& stat : *array) visit(stat.peak);
  }
  visit(stats.oversize_allocations.peak);
}

// The 122 keys alone, sorted.
const std::vector<std::string>& MemoryStatsKeys();

}  // namespace gpumux
