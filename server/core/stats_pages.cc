#include "server/core/stats_pages.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

// Pointers to the figures ForEachLocalCounter visits, in its order.
std::vector<int64_t*> Counters(DeviceStats& stats) {
  std::vector<int64_t*> out;
  ForEachLocalCounter(stats, [&](int64_t& figure) { out.push_back(&figure); });
  return out;
}

std::vector<int64_t*> Peaks(DeviceStats& stats) {
  std::vector<int64_t*> out;
  ForEachLocalPeak(stats, [&](int64_t& figure) { out.push_back(&figure); });
  return out;
}

}  // namespace

StatsPages::StatsPages(MemoryFileTable* memory_files, int device_count)
    : memory_files_(memory_files),
      device_count_(device_count),
      retired_(static_cast<size_t>(device_count)),
      peak_floor_(static_cast<size_t>(device_count)) {}

StatsPages::~StatsPages() {
  absl::MutexLock lock(&mu_);
  for (const auto& [session, page] : pages_) memory_files_->Remove(page->info.key);
}

absl::StatusOr<StatsPageInfo> StatsPages::GetOrCreate(SessionId session) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = pages_.find(session); it != pages_.end()) return it->second->info;
  }
  const uint64_t size = StatsPageBytes(device_count_);
  GPUMUX_ASSIGN_OR_RETURN(SealedMemory memory, SealedMemory::Create("gpumux-stats", size));
  {
    GPUMUX_ASSIGN_OR_RETURN(MemoryMapping writable, memory.Map(/*writable=*/true));
    InitStatsPage(writable.data(), device_count_);
  }
  auto page = std::make_shared<Page>();
  GPUMUX_ASSIGN_OR_RETURN(page->mapping, memory.Map(/*writable=*/false));
  page->reader = std::make_unique<StatsPageReader>(page->mapping.data(), device_count_);
  page->info.size = size;
  page->info.device_count = device_count_;
  {
    absl::MutexLock books(&page->mu);
    page->devices.resize(static_cast<size_t>(device_count_));
  }
  absl::MutexLock lock(&mu_);
  if (auto it = pages_.find(session); it != pages_.end()) return it->second->info;  // a race
  page->info.key =
      memory_files_->Add(std::make_shared<const SealedMemory>(std::move(memory)), session);
  pages_.emplace(session, page);
  return page->info;
}

std::optional<StatsPageFigures> StatsPages::Read(SessionId session, DeviceIndex device,
                                                 int64_t reserved) const {
  std::shared_ptr<Page> page;
  {
    absl::MutexLock lock(&mu_);
    auto it = pages_.find(session);
    if (it == pages_.end()) return std::nullopt;
    page = it->second;
  }
  if (page->rejected.load()) return std::nullopt;
  std::optional<DeviceStats> stats = page->reader->Read(device.value());
  if (!stats.has_value()) return std::nullopt;  // a writer mid-way: none this time
  if (!PlausibleLocalStats(*stats, reserved)) {
    if (!page->rejected.exchange(true)) {
      spdlog::warn(
          "session {}: its stats page for device {} contradicts the daemon's books; its figures "
          "count as none until the session ends",
          session.value(), device.value());
    }
    return std::nullopt;
  }
  StatsPageFigures figures{.session = *stats, .device = *stats};
  absl::MutexLock lock(&page->mu);
  DeviceBooks& books = page->devices[static_cast<size_t>(device.value())];
  if (books.last.has_value()) {
    // A counter below its last value was reset by the client: what it had
    // counted stays in the device's figures.
    const std::vector<int64_t*> now = Counters(figures.session);
    const std::vector<int64_t*> last = Counters(*books.last);
    const std::vector<int64_t*> carried = Counters(books.carried);
    const std::vector<int64_t*> device_part = Counters(figures.device);
    for (size_t i = 0; i < now.size(); ++i) {
      if (*now[i] < *last[i]) *carried[i] = SaturatingAdd(*carried[i], *last[i]);
      *device_part[i] = SaturatingAdd(*carried[i], *now[i]);
    }
  }
  books.last = figures.session;
  books.device = figures.device;
  return figures;
}

bool StatsPages::Has(SessionId session) const {
  absl::MutexLock lock(&mu_);
  return pages_.contains(session);
}

bool StatsPages::Rejected(SessionId session) const {
  absl::MutexLock lock(&mu_);
  auto it = pages_.find(session);
  return it != pages_.end() && it->second->rejected.load();
}

std::vector<SessionId> StatsPages::Sessions() const {
  absl::MutexLock lock(&mu_);
  std::vector<SessionId> out;
  out.reserve(pages_.size());
  for (const auto& [session, page] : pages_) out.push_back(session);
  return out;
}

void StatsPages::Remove(SessionId session) {
  absl::MutexLock lock(&mu_);
  auto it = pages_.find(session);
  if (it == pages_.end()) return;
  memory_files_->Remove(it->second->info.key);
  {
    const Page& page = *it->second;
    absl::MutexLock books(&page.mu);
    for (size_t d = 0; d < page.devices.size(); ++d) {
      if (!page.devices[d].last.has_value()) continue;
      retired_[d] = MergeLocalStats(retired_[d], RetiredLocalStats(page.devices[d].device));
    }
  }
  pages_.erase(it);
}

DeviceStats StatsPages::Settle(DeviceIndex device, const DeviceStats& device_stats) const {
  const size_t d = static_cast<size_t>(device.value());
  absl::MutexLock lock(&mu_);
  DeviceStats settled = MergeLocalStats(device_stats, retired_[d]);
  const std::vector<int64_t*> peaks = Peaks(settled);
  const std::vector<int64_t*> floor = Peaks(peak_floor_[d]);
  for (size_t i = 0; i < peaks.size(); ++i) {
    *peaks[i] = std::max(*peaks[i], *floor[i]);
    *floor[i] = *peaks[i];
  }
  return settled;
}

}  // namespace gpumux
