#include "server/core/stats_pages.h"

#include <utility>

#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {

StatsPages::StatsPages(MemoryFileTable* memory_files, int device_count)
    : memory_files_(memory_files), device_count_(device_count) {}

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
  absl::MutexLock lock(&mu_);
  if (auto it = pages_.find(session); it != pages_.end()) return it->second->info;  // a race
  page->info.key =
      memory_files_->Add(std::make_shared<const SealedMemory>(std::move(memory)), session);
  pages_.emplace(session, page);
  return page->info;
}

std::optional<DeviceStats> StatsPages::Read(SessionId session, DeviceIndex device,
                                            int64_t reserved) const {
  std::shared_ptr<Page> page;
  {
    absl::MutexLock lock(&mu_);
    auto it = pages_.find(session);
    if (it == pages_.end()) return std::nullopt;
    page = it->second;
  }
  std::optional<DeviceStats> stats = page->reader->Read(device.value());
  if (stats.has_value() && PlausibleLocalStats(*stats, reserved)) return stats;
  if (!page->rejected.exchange(true)) {
    spdlog::warn(
        "session {}: its stats page {} for device {}; its figures count as none until the "
        "session ends",
        session.value(),
        stats.has_value() ? "contradicts the daemon's books" : "gives no consistent copy",
        device.value());
  }
  return std::nullopt;
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
  pages_.erase(it);
}

}  // namespace gpumux
