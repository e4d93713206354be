#pragma once

// AddressOnlyDevice: the device an in-process replay allocates on, a
// SegmentSource of one emulated device whose segments are addresses only,
// with no memory behind them, so that replaying the trace of a 141 GiB
// device takes none. It keeps the books as the host backend does (a segment
// or a mapped page of an expandable segment takes its size of the device's
// memory; addresses come first fit from an EmulatedAddressSpace at the host
// backend's base), so a replay here gets the addresses and refusals a
// daemon on the host backend would give. Events complete when recorded: no
// work runs. Thread-safe.

#include <cstdint>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/segments/emulated_address_space.h"
#include "common/segments/segment_source.h"

namespace gpumux {

class AddressOnlyDevice final : public SegmentSource {
 public:
  // INVALID_ARGUMENT for `memory` outside [2 MiB, 4 TiB] (the span of
  // emulated addresses).
  static absl::StatusOr<std::unique_ptr<AddressOnlyDevice>> Create(uint64_t memory);

  int device_count() const override { return 1; }
  uint64_t TotalMemory(DeviceIndex /*device*/) const override { return memory_; }
  absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const override;

  // INVALID_ARGUMENT for a device other than 0 or a size that is not a
  // positive multiple of 512; RESOURCE_EXHAUSTED past the device's memory.
  absl::StatusOr<BackendSegment> ObtainSegment(DeviceIndex device, uint64_t size, StreamId stream,
                                               bool small_pool) override;
  // NOT_FOUND for an address that is no segment's.
  absl::Status ReturnSegment(DeviceIndex device, uint64_t address) override;

  bool SupportsExpandableSegments() const override { return true; }
  // Errors as the host backend's (host_backend.h).
  absl::StatusOr<BackendRange> ReserveRange(DeviceIndex device, uint64_t size, uint64_t page_size,
                                            StreamId stream, bool small_pool) override;
  absl::Status MapPages(DeviceIndex device, uint64_t address, uint64_t size) override;
  absl::Status UnmapPages(DeviceIndex device, uint64_t address, uint64_t size) override;
  absl::Status ReleaseRange(DeviceIndex device, uint64_t address) override;

  // NOT_FOUND for an event this device did not create or destroyed.
  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override;
  absl::Status DestroyEvent(BackendEvent event) override;
  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override;
  absl::StatusOr<bool> QueryEvent(BackendEvent event) override;
  absl::Status SynchronizeEvent(BackendEvent event) override;

 private:
  struct Range {
    uint64_t size = 0;
    uint64_t page_size = 0;
    std::vector<bool> pages;  // mapped or not, by offset / page_size
  };

  explicit AddressOnlyDevice(uint64_t memory);
  absl::Status CheckEvent(BackendEvent event) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t memory_;
  mutable absl::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  EmulatedAddressSpace addresses_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> segments_ ABSL_GUARDED_BY(mu_);  // address -> size
  std::map<uint64_t, Range> ranges_ ABSL_GUARDED_BY(mu_);       // by address
  absl::flat_hash_set<uint64_t> events_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace gpumux
