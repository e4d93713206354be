#include "common/memory_stats.h"

#include <algorithm>

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

namespace {

void AddStat(Stat& into, const Stat& from) {
  into.current += from.current;
  into.peak += from.peak;
  into.allocated += from.allocated;
  into.freed += from.freed;
}

void AddArray(StatArray& into, const StatArray& from) {
  for (size_t i = 0; i < into.size(); ++i) AddStat(into[i], from[i]);
}

bool PlausibleArray(const StatArray& a) {
  for (const Stat& s : a) {
    if (s.current < 0 || s.current > s.peak) return false;
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
  out.num_alloc_retries += local.num_alloc_retries;
  out.num_ooms += local.num_ooms;
  AddStat(out.oversize_allocations, local.oversize_allocations);
  out.num_sync_all_streams += local.num_sync_all_streams;
  return out;
}

bool PlausibleLocalStats(const DeviceStats& stats, int64_t reserved) {
  for (const StatArray* a :
       {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
        &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
        &stats.inactive_split_bytes, &stats.requested_bytes}) {
    if (!PlausibleArray(*a)) return false;
  }
  const int64_t active = stats.active_bytes[kAggregate].current;
  return stats.allocated_bytes[kAggregate].current <= active && active <= reserved &&
         stats.requested_bytes[kAggregate].current <= active &&
         stats.reserved_bytes[kAggregate].current <= reserved && stats.num_alloc_retries >= 0 &&
         stats.num_ooms >= 0 && stats.num_sync_all_streams >= 0;
}

}  // namespace gpumux
