#include "replay/address_only_device.h"

#include <memory>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/segments/page_ranges.h"

namespace gpumux {
namespace {

// The host backend's device 0: the same addresses for the same requests.
constexpr uint64_t kAddressBase = EmulatedAddressSpace::kBase;
constexpr uint64_t kAddressSpan = EmulatedAddressSpace::kSpan;
constexpr uint64_t kSizeGranularity = 512;
constexpr uint64_t kPageGranularity = uint64_t{2} << 20;
constexpr absl::string_view kName = "replay device 0";

absl::Status CheckDevice(DeviceIndex device) {
  if (device.value() == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("a replay has one device (0), not device %d", device.value()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AddressOnlyDevice>> AddressOnlyDevice::Create(uint64_t memory) {
  if (memory < EmulatedAddressSpace::kAlignment || memory > kAddressSpan) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a replay's device of %d bytes is not in [2 MiB, 4 TiB]", memory));
  }
  return std::unique_ptr<AddressOnlyDevice>(new AddressOnlyDevice(memory));
}

AddressOnlyDevice::AddressOnlyDevice(uint64_t memory)
    : memory_(memory), addresses_(kAddressBase, kAddressSpan) {}

absl::StatusOr<uint64_t> AddressOnlyDevice::FreeMemory(DeviceIndex device) const {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  absl::MutexLock lock(&mu_);
  return memory_ - used_;
}

absl::StatusOr<BackendSegment> AddressOnlyDevice::ObtainSegment(DeviceIndex device, uint64_t size,
                                                                StreamId /*stream*/,
                                                                bool /*small_pool*/) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (size == 0 || size % kSizeGranularity != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: segment size %d bytes must be a positive multiple of %d", kName, size,
                        kSizeGranularity));
  }
  absl::MutexLock lock(&mu_);
  if (size > memory_ - used_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: cannot allocate %d bytes: %d of %d bytes free", kName, size,
                        memory_ - used_, memory_));
  }
  const std::optional<uint64_t> address = addresses_.Take(size);
  if (!address.has_value()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: cannot allocate %d bytes: no contiguous range left in the emulated address space",
        kName, size));
  }
  segments_.emplace(*address, size);
  used_ += size;
  return BackendSegment{*address, size, SegmentHandle{SegmentHandle::Kind::kHostMemfd, ""}};
}

absl::Status AddressOnlyDevice::ReturnSegment(DeviceIndex device, uint64_t address) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  absl::MutexLock lock(&mu_);
  auto it = segments_.find(address);
  if (it == segments_.end()) {
    return absl::NotFoundError(absl::StrFormat("%s: no segment at address 0x%x", kName, address));
  }
  used_ -= it->second;
  addresses_.Give(address, it->second);
  segments_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<BackendRange> AddressOnlyDevice::ReserveRange(DeviceIndex device, uint64_t size,
                                                             uint64_t page_size,
                                                             StreamId /*stream*/,
                                                             bool /*small_pool*/) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (page_size == 0 || page_size % kPageGranularity != 0 || size == 0 || size % page_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: an expandable segment of %d bytes in pages of %d bytes: the page size must be a "
        "positive multiple of 2 MiB and the size a positive multiple of it",
        kName, size, page_size));
  }
  absl::MutexLock lock(&mu_);
  const std::optional<uint64_t> address = addresses_.Take(size);
  if (!address.has_value()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: cannot reserve %d bytes for an expandable segment: no contiguous range left in the "
        "emulated address space",
        kName, size));
  }
  ranges_.emplace(*address, Range{size, page_size, std::vector<bool>(size / page_size, false)});
  return BackendRange{*address, size, SegmentHandle{SegmentHandle::Kind::kHostPages, "", ""}};
}

absl::Status AddressOnlyDevice::MapPages(DeviceIndex device, uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  absl::MutexLock lock(&mu_);
  GPUMUX_ASSIGN_OR_RETURN(
      const PageSpan<Range> span,
      FindPages(ranges_, kName, address, size, /*mapped=*/false, [](bool page) { return page; }));
  if (size > memory_ - used_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: cannot map %d bytes: %d of %d bytes free", kName, size, memory_ - used_, memory_));
  }
  for (uint64_t i = span.first; i < span.first + span.count; ++i) span.range->pages[i] = true;
  used_ += size;
  return absl::OkStatus();
}

absl::Status AddressOnlyDevice::UnmapPages(DeviceIndex device, uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  absl::MutexLock lock(&mu_);
  GPUMUX_ASSIGN_OR_RETURN(
      const PageSpan<Range> span,
      FindPages(ranges_, kName, address, size, /*mapped=*/true, [](bool page) { return page; }));
  for (uint64_t i = span.first; i < span.first + span.count; ++i) span.range->pages[i] = false;
  used_ -= size;
  return absl::OkStatus();
}

absl::Status AddressOnlyDevice::ReleaseRange(DeviceIndex device, uint64_t address) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  absl::MutexLock lock(&mu_);
  auto it = ranges_.find(address);
  if (it == ranges_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("%s: no expandable segment at address 0x%x", kName, address));
  }
  const Range& range = it->second;
  for (bool mapped : range.pages) {
    if (mapped) used_ -= range.page_size;
  }
  addresses_.Give(address, range.size);
  ranges_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<BackendEvent> AddressOnlyDevice::CreateEvent(DeviceIndex device,
                                                            EventFlags /*flags*/) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  absl::MutexLock lock(&mu_);
  const uint64_t event = next_event_++;
  events_.insert(event);
  return BackendEvent(event);
}

absl::Status AddressOnlyDevice::CheckEvent(BackendEvent event) const {
  if (events_.contains(event.value())) return absl::OkStatus();
  return absl::NotFoundError(absl::StrFormat("%s: no event %d", kName, event.value()));
}

absl::Status AddressOnlyDevice::DestroyEvent(BackendEvent event) {
  absl::MutexLock lock(&mu_);
  GPUMUX_RETURN_IF_ERROR(CheckEvent(event));
  events_.erase(event.value());
  return absl::OkStatus();
}

absl::Status AddressOnlyDevice::RecordEvent(BackendEvent event, BackendStream /*stream*/) {
  absl::MutexLock lock(&mu_);
  return CheckEvent(event);
}

absl::StatusOr<bool> AddressOnlyDevice::QueryEvent(BackendEvent event) {
  absl::MutexLock lock(&mu_);
  GPUMUX_RETURN_IF_ERROR(CheckEvent(event));
  return true;
}

absl::Status AddressOnlyDevice::SynchronizeEvent(BackendEvent event) {
  absl::MutexLock lock(&mu_);
  return CheckEvent(event);
}

}  // namespace gpumux
