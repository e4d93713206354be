#include "common/formats/memory_stats.h"

#include <algorithm>
#include <cstdint>

namespace gpumux {
namespace {

constexpr const char* kPoolNames[] = {"all", "small_pool", "large_pool"};

template <typename F>
void ForEachStatArray(DeviceStats& s, F f) {
  for (StatArray* a :
       {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
        &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (Stat& stat : *a) f(stat);
  }
}

void AddStat(std::vector<std::pair<std::string, int64_t>>& out, const std::string& prefix,
             const Stat& s) {
  out.emplace_back(prefix + ".current", s.current);
  out.emplace_back(prefix + ".peak", s.peak);
  out.emplace_back(prefix + ".allocated", s.allocated);
  out.emplace_back(prefix + ".freed", s.freed);
}

}  // namespace

void DeviceStats::ResetAccumulated() {
  ForEachStatArray(*this, [](Stat& s) { s.ResetAccumulated(); });
  oversize_allocations.ResetAccumulated();
  oversize_segments.ResetAccumulated();
  num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc = num_device_free = 0;
}

void DeviceStats::ResetPeak() {
  ForEachStatArray(*this, [](Stat& s) { s.ResetPeak(); });
  oversize_allocations.ResetPeak();
  oversize_segments.ResetPeak();
}

std::vector<std::pair<std::string, int64_t>> FlattenMemoryStats(const DeviceStats& s) {
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(122);
  const std::pair<const char*, const StatArray*> families[] = {
      {"allocation", &s.allocation},
      {"segment", &s.segment},
      {"active", &s.active},
      {"inactive_split", &s.inactive_split},
      {"allocated_bytes", &s.allocated_bytes},
      {"reserved_bytes", &s.reserved_bytes},
      {"active_bytes", &s.active_bytes},
      {"inactive_split_bytes", &s.inactive_split_bytes},
      {"requested_bytes", &s.requested_bytes},
  };
  for (const auto& [name, array] : families) {
    for (int pool = 0; pool < 3; ++pool) {
      AddStat(out, std::string(name) + "." + kPoolNames[pool], (*array)[pool]);
    }
  }
  AddStat(out, "oversize_allocations", s.oversize_allocations);
  AddStat(out, "oversize_segments", s.oversize_segments);
  out.emplace_back("num_alloc_retries", s.num_alloc_retries);
  out.emplace_back("num_ooms", s.num_ooms);
  out.emplace_back("max_split_size", s.max_split_size);
  out.emplace_back("num_sync_all_streams", s.num_sync_all_streams);
  out.emplace_back("num_device_alloc", s.num_device_alloc);
  out.emplace_back("num_device_free", s.num_device_free);
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<std::string>& MemoryStatsKeys() {
  static const std::vector<std::string>* keys = [] {
    auto* k = new std::vector<std::string>;
    for (auto& [key, value] : FlattenMemoryStats(DeviceStats{})) k->push_back(key);
    return k;
  }();
  return *keys;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return b < 0 ? INT64_MIN : INT64_MAX;
  return sum;
}

namespace {

void AddStat(Stat& into, const Stat& from) {
  into.current = SaturatingAdd(into.current, from.current);
  into.peak = SaturatingAdd(into.peak, from.peak);
  into.allocated = SaturatingAdd(into.allocated, from.allocated);
  into.freed = SaturatingAdd(into.freed, from.freed);
}

void AddArray(StatArray& into, const StatArray& from) {
  for (size_t i = 0; i < into.size(); ++i) AddStat(into[i], from[i]);
}

bool InRange(int64_t figure) { return figure >= 0 && figure <= kMaxLocalFigure; }

bool PlausibleStat(const Stat& s) {
  return InRange(s.current) && InRange(s.peak) && InRange(s.allocated) && InRange(s.freed) &&
         s.current <= s.peak;
}

// Each pool's figures plausible, and `all` their sum.
bool PlausibleArray(const StatArray& a) {
  for (const Stat& s : a) {
    if (!PlausibleStat(s)) return false;
  }
  const Stat& all = a[kAggregate];
  const Stat& small = a[kSmallPool];
  const Stat& large = a[kLargePool];
  return all.current == small.current + large.current &&
         all.allocated == small.allocated + large.allocated &&
         all.freed == small.freed + large.freed && all.peak <= small.peak + large.peak &&
         all.peak >= std::max(small.peak, large.peak);
}

// At most one block per 512 bytes (PyTorch's smallest block), pool by pool.
bool BlocksFit(const StatArray& blocks, const StatArray& bytes) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].current > bytes[i].current / 512 || blocks[i].peak > bytes[i].peak / 512)
      return false;
  }
  return true;
}

}  // namespace

DeviceStats MergeLocalStats(const DeviceStats& daemon, const DeviceStats& local) {
  DeviceStats out = daemon;
  for (auto [into, from] : {std::pair{&out.allocation, &local.allocation},
                            {&out.active, &local.active},
                            {&out.inactive_split, &local.inactive_split},
                            {&out.allocated_bytes, &local.allocated_bytes},
                            {&out.active_bytes, &local.active_bytes},
                            {&out.inactive_split_bytes, &local.inactive_split_bytes},
                            {&out.requested_bytes, &local.requested_bytes}}) {
    AddArray(*into, *from);
  }
  out.num_alloc_retries = SaturatingAdd(out.num_alloc_retries, local.num_alloc_retries);
  out.num_ooms = SaturatingAdd(out.num_ooms, local.num_ooms);
  AddStat(out.oversize_allocations, local.oversize_allocations);
  out.num_sync_all_streams = SaturatingAdd(out.num_sync_all_streams, local.num_sync_all_streams);
  return out;
}

bool PlausibleLocalStats(const DeviceStats& stats, int64_t reserved) {
  for (const StatArray* a :
       {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
        &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
        &stats.inactive_split_bytes, &stats.requested_bytes}) {
    if (!PlausibleArray(*a)) return false;
  }
  if (!PlausibleStat(stats.oversize_allocations) || !PlausibleStat(stats.oversize_segments) ||
      !InRange(stats.num_alloc_retries) || !InRange(stats.num_ooms) ||
      !InRange(stats.num_sync_all_streams)) {
    return false;
  }
  if (!BlocksFit(stats.allocation, stats.allocated_bytes) ||
      !BlocksFit(stats.active, stats.active_bytes) ||
      !BlocksFit(stats.inactive_split, stats.inactive_split_bytes)) {
    return false;
  }
  const int64_t active = stats.active_bytes[kAggregate].current;
  return stats.allocated_bytes[kAggregate].current <= active && active <= reserved &&
         stats.requested_bytes[kAggregate].current <= active &&
         stats.inactive_split_bytes[kAggregate].current <= reserved &&
         stats.reserved_bytes[kAggregate].current <= reserved;
}

DeviceStats RetiredLocalStats(const DeviceStats& local) {
  DeviceStats out = local;
  for (StatArray* array :
       {&out.allocation, &out.segment, &out.active, &out.inactive_split, &out.allocated_bytes,
        &out.reserved_bytes, &out.active_bytes, &out.inactive_split_bytes, &out.requested_bytes}) {
    for (Stat& stat : *array) {
      stat.freed = SaturatingAdd(stat.freed, stat.current);
      stat.current = 0;
    }
  }
  for (Stat* stat : {&out.oversize_allocations, &out.oversize_segments}) {
    stat->freed = SaturatingAdd(stat->freed, stat->current);
    stat->current = 0;
  }
  ForEachLocalPeak(out, [](int64_t& peak) { peak = 0; });
  return out;
}

}  // namespace gpumux
