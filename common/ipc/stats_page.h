#pragma once

// StatsPage: the statistics a client's own allocator publishes to the daemon
// (local allocation, docs/design.md): one slot per device holding PyTorch's
// 122 memory_stats values (DeviceStats, which is exactly 122 int64s) under a
// seqlock. The daemon creates the page as a sealed memory file, files it for
// the one session and maps it read-only; the client fetches it over the
// memory socket and maps it writable. Sealed and fully backed, so nothing the
// client does to it can fault the daemon; its contents are untrusted, so a
// read returns what was there or says it could not get a consistent copy,
// and the daemon judges the figures itself (StatsPageReader's caller).
//
// Layout: a 64-byte header {magic, version, device count} and then, per
// device, a 64-byte-aligned slot {sequence, 122 values}. The writer makes
// the sequence odd, stores the values, and makes it even again; a reader
// copies the values between two equal even reads of the sequence. Every
// word is a lock-free, address-free std::atomic, so concurrent access across
// processes is defined.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/formats/memory_stats.h"

namespace gpumux {

inline constexpr size_t kStatsValues = sizeof(DeviceStats) / sizeof(int64_t);
static_assert(kStatsValues == 122, "DeviceStats is PyTorch's 122 values");
inline constexpr uint64_t kStatsPageMagic = 0x6770756d75787374;  // "gpumuxst"
inline constexpr uint32_t kStatsPageVersion = 1;
inline constexpr int kMaxStatsPageDevices = 1024;

struct StatsPageHeader {
  std::atomic<uint64_t> magic;
  std::atomic<uint32_t> version;
  std::atomic<uint32_t> device_count;
  char padding[48];
};
static_assert(sizeof(StatsPageHeader) == 64);

struct alignas(64) StatsSlot {
  std::atomic<uint64_t> sequence;
  std::atomic<int64_t> values[kStatsValues];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<int64_t>::is_always_lock_free);

// Bytes of a page for `device_count` devices.
inline uint64_t StatsPageBytes(int device_count) {
  return sizeof(StatsPageHeader) + static_cast<uint64_t>(device_count) * sizeof(StatsSlot);
}

// Writes the header of a fresh (zero-filled) page of StatsPageBytes(count) bytes.
void InitStatsPage(void* page, int device_count);

// The client's side. Not thread-safe per device: the caller serializes the
// writes of one device (the allocator publishes under its device lock).
class StatsPageWriter {
 public:
  // `page` must hold StatsPageBytes(device_count) bytes and outlive this.
  // INVALID_ARGUMENT when its header is not a page for `device_count` devices.
  static absl::StatusOr<StatsPageWriter> Attach(void* page, uint64_t size, int device_count);
  void Publish(int device, const DeviceStats& stats);

 private:
  StatsPageWriter(StatsSlot* slots, int device_count)
      : slots_(slots), device_count_(device_count) {}
  StatsSlot* slots_;
  int device_count_;
};

// The daemon's side: reads never block and never trust the page.
class StatsPageReader {
 public:
  // `page` (read-only mapping of StatsPageBytes(device_count) bytes, made
  // by InitStatsPage) must outlive this.
  StatsPageReader(const void* page, int device_count);
  // A consistent copy of device `device`'s slot; nullopt when the writer
  // (or a hostile client) kept it changing over every try, or the header
  // was overwritten. A slot never written reads as all zeros.
  std::optional<DeviceStats> Read(int device) const;

 private:
  const StatsPageHeader* header_;
  const StatsSlot* slots_;
  int device_count_;
};

}  // namespace gpumux
