#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "server/backend/host/host_backend.h"

// Expandable segments on the host backend: a reserved range of emulated
// addresses per segment, with a sealed memory file per mapped page.

namespace gpumux {
namespace {

constexpr uint64_t kPageGranularity = uint64_t{2} << 20;

}  // namespace

absl::StatusOr<BackendRange> HostBackend::ReserveRange(DeviceIndex device, uint64_t size,
                                                       uint64_t page_size, StreamId /*stream*/,
                                                       bool /*small_pool*/) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (page_size == 0 || page_size % kPageGranularity != 0 || size == 0 || size % page_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host device %d: an expandable segment of %d bytes in pages of %d bytes: the page size "
        "must be a positive multiple of 2 MiB and the size a positive multiple of it",
        device.value(), size, page_size));
  }
  std::shared_ptr<AddressReservation> mapping;
  if (options_.backed) {
    GPUMUX_ASSIGN_OR_RETURN(AddressReservation reserved, AddressReservation::Reserve(size));
    mapping = std::make_shared<AddressReservation>(std::move(reserved));
  }
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  std::optional<uint64_t> address = d.addresses.Take(size);
  if (!address.has_value()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "host device %d: cannot reserve %d bytes for an expandable segment: no contiguous range "
        "left in the emulated address space (release segments)",
        device.value(), size));
  }
  Range& range = d.ranges[*address];
  range.size = size;
  range.page_size = page_size;
  range.pages.resize(size / page_size);
  range.mapping = std::move(mapping);
  return BackendRange{*address, size, SegmentHandle{SegmentHandle::Kind::kHostPages, "", ""}};
}

absl::StatusOr<HostBackend::PageSpan> HostBackend::FindPagesLocked(Device& d, uint64_t address,
                                                                   uint64_t size, bool mapped) {
  return FindPages(d.ranges, absl::StrCat("host device ", d.info.index.value()), address, size,
                   mapped, [](const Page& page) { return page.mapped; });
}

absl::Status HostBackend::MapPages(DeviceIndex device, uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  GPUMUX_ASSIGN_OR_RETURN(const PageSpan span, FindPagesLocked(d, address, size, /*mapped=*/false));
  Range* range = span.range;
  const uint64_t first = span.first;
  const uint64_t count = span.count;
  const uint64_t total = d.info.total_memory;
  if (size > total - d.used) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("host device %d: cannot map %d bytes: %d of %d bytes free", device.value(),
                        size, total - d.used, total));
  }
  if (options_.backed) {
    // All or nothing: pages created here are dropped again on a failure.
    std::vector<Page> pages(count);
    for (uint64_t i = 0; i < count; ++i) {
      absl::StatusOr<SealedMemory> memory = SealedMemory::Create(
          absl::StrCat("gpumux-d", device.value(), "-page-", d.next_serial++), range->page_size);
      const absl::Status& status = memory.status();
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrFormat("host device %d: cannot map %d bytes: %s",
                                            device.value(), size, status.message()));
      }
      pages[i].memory = ShareDiscardedOnRelease(*std::move(memory));
    }
    for (uint64_t i = 0; i < count; ++i) {
      pages[i].key = memory_files_->Add(pages[i].memory);
      pages[i].mapped = true;
      range->pages[first + i] = std::move(pages[i]);
    }
  } else {
    for (uint64_t i = first; i < first + count; ++i) range->pages[i].mapped = true;
  }
  d.used += size;
  return absl::OkStatus();
}

absl::Status HostBackend::UnmapPages(DeviceIndex device, uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  GPUMUX_ASSIGN_OR_RETURN(const PageSpan span, FindPagesLocked(d, address, size, /*mapped=*/true));
  Range* range = span.range;
  const uint64_t first = span.first;
  const uint64_t count = span.count;
  // Out of this process's view first; a page whose view is gone but that
  // stays mapped (an mmap failure below) is viewed again on its next use.
  for (uint64_t i = first; i < first + count; ++i) {
    Page& page = range->pages[i];
    if (!page.viewed) continue;
    GPUMUX_RETURN_IF_ERROR(range->mapping->Scratch(i * range->page_size, range->page_size));
    page.viewed = false;
  }
  for (uint64_t i = first; i < first + count; ++i) {
    Page& page = range->pages[i];
    if (!page.key.empty()) memory_files_->Remove(page.key);
    page = Page();
  }
  d.used -= size;
  return absl::OkStatus();
}

absl::Status HostBackend::ReleaseRange(DeviceIndex device, uint64_t address) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  auto it = d.ranges.find(address);
  if (it == d.ranges.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "host device %d: no expandable segment at address 0x%x", device.value(), address));
  }
  Range& range = it->second;
  for (Page& page : range.pages) {
    if (!page.mapped) continue;
    if (!page.key.empty()) memory_files_->Remove(page.key);
    d.used -= range.page_size;
  }
  // Queued work holding the mapping keeps it until it ran.
  d.addresses.Give(address, range.size);
  d.ranges.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PageHandle>> HostBackend::PageHandles(DeviceIndex device,
                                                                 uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  auto it = RangeAt(d.ranges, address);
  if (it == d.ranges.end() || size == 0 || size > it->second.size - (address - it->first)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("host device %d: %d bytes at 0x%x are not inside one expandable segment",
                        device.value(), size, address));
  }
  const Range& range = it->second;
  if (range.mapping == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "host device %d: expandable segment at 0x%x has no memory behind it (a backend for trace "
        "replay)",
        device.value(), it->first));
  }
  return HandlesOfPages(range, it->first, address - it->first, size,
                        absl::StrCat("host device ", device.value()),
                        [](const Page& page) { return page.mapped; });
}

std::optional<absl::StatusOr<HostBackend::HostView>> HostBackend::TranslateInRangeLocked(
    Device& d, uint64_t address, uint64_t bytes) {
  auto it = RangeAt(d.ranges, address);
  if (it == d.ranges.end()) return std::nullopt;
  Range& range = it->second;
  const uint64_t offset = address - it->first;
  const DeviceIndex device = d.info.index;
  if (bytes > range.size - offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host device %d: %d bytes at 0x%x run past the end of their expandable segment",
        device.value(), bytes, address));
  }
  const uint64_t first = offset / range.page_size;
  const uint64_t last = bytes == 0 ? first : (offset + bytes - 1) / range.page_size;
  for (uint64_t i = first; i <= last; ++i) {
    if (!range.pages[i].mapped) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "host device %d: %d bytes at 0x%x touch an unmapped page of an expandable segment",
          device.value(), bytes, address));
    }
  }
  if (range.mapping == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "host device %d: expandable segment at 0x%x has no memory behind it (a backend for trace "
        "replay)",
        device.value(), it->first));
  }
  for (uint64_t i = first; i <= last; ++i) {
    Page& page = range.pages[i];
    if (page.viewed) continue;
    // The file is backed in full: mapping it never faults later.
    if (absl::Status status = range.mapping->MapAt(i * range.page_size, *page.memory);
        !status.ok()) {
      return status;
    }
    page.viewed = true;
  }
  return HostView{range.mapping, reinterpret_cast<uint8_t*>(range.mapping->data()) + offset};
}

}  // namespace gpumux
