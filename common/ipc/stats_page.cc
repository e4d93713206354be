#include "common/ipc/stats_page.h"

#include <cstring>
#include <new>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

StatsSlot* SlotsOf(void* page) {
  return reinterpret_cast<StatsSlot*>(static_cast<char*>(page) + sizeof(StatsPageHeader));
}

// How often a read tries for a consistent copy before it gives up: a writer
// holds a slot odd for well under a microsecond.
constexpr int kReadTries = 64;

}  // namespace

void InitStatsPage(void* page, int device_count) {
  auto* header = new (page) StatsPageHeader;
  header->version.store(kStatsPageVersion, std::memory_order_relaxed);
  header->device_count.store(static_cast<uint32_t>(device_count), std::memory_order_relaxed);
  StatsSlot* slots = SlotsOf(page);
  for (int d = 0; d < device_count; ++d) new (&slots[d]) StatsSlot;
  header->magic.store(kStatsPageMagic, std::memory_order_release);
}

absl::StatusOr<StatsPageWriter> StatsPageWriter::Attach(void* page, uint64_t size,
                                                        int device_count) {
  if (device_count < 0 || device_count > kMaxStatsPageDevices ||
      size < StatsPageBytes(device_count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a stats page of ", size, " bytes cannot hold ", device_count, " devices"));
  }
  const auto* header = static_cast<const StatsPageHeader*>(page);
  if (header->magic.load(std::memory_order_acquire) != kStatsPageMagic ||
      header->version.load(std::memory_order_relaxed) != kStatsPageVersion ||
      header->device_count.load(std::memory_order_relaxed) != static_cast<uint32_t>(device_count)) {
    return absl::InvalidArgumentError("the daemon's stats page has an unknown header");
  }
  return StatsPageWriter(SlotsOf(page), device_count);
}

void StatsPageWriter::Publish(int device, const DeviceStats& stats) {
  if (device < 0 || device >= device_count_) return;
  StatsSlot& slot = slots_[device];
  static_assert(std::is_standard_layout_v<DeviceStats> &&
                sizeof(DeviceStats) == kStatsValues * sizeof(int64_t));
  // Read in place: copying them out first (a `rep movsq`) cost as much
  // again, on every allocation and free of a local allocator.
  const auto* values = reinterpret_cast<const int64_t*>(&stats);
  const uint64_t sequence = slot.sequence.load(std::memory_order_relaxed);
  slot.sequence.store(sequence + 1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t i = 0; i < kStatsValues; ++i)
    slot.values[i].store(values[i], std::memory_order_relaxed);
  slot.sequence.store(sequence + 2, std::memory_order_release);
}

StatsPageReader::StatsPageReader(const void* page, int device_count)
    : header_(static_cast<const StatsPageHeader*>(page)),
      slots_(reinterpret_cast<const StatsSlot*>(static_cast<const char*>(page) +
                                                sizeof(StatsPageHeader))),
      device_count_(device_count) {}

std::optional<DeviceStats> StatsPageReader::Read(int device) const {
  if (device < 0 || device >= device_count_) return std::nullopt;
  if (header_->magic.load(std::memory_order_relaxed) != kStatsPageMagic) return std::nullopt;
  const StatsSlot& slot = slots_[device];
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    const uint64_t before = slot.sequence.load(std::memory_order_acquire);
    if (before % 2 != 0) continue;
    int64_t values[kStatsValues];
    for (size_t i = 0; i < kStatsValues; ++i)
      values[i] = slot.values[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.sequence.load(std::memory_order_relaxed) != before) continue;
    DeviceStats stats;
    std::memcpy(&stats, values, sizeof(values));
    return stats;
  }
  return std::nullopt;
}

}  // namespace gpumux
