#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/cuda_vmm.h"
#include "server/backend/cuda/cuda_backend.h"
#include "spdlog/spdlog.h"

// Expandable segments on the CUDA backend: a cuMemAddressReserve'd range per
// segment, a cuMemCreate allocation per mapped page, exported to clients as
// POSIX descriptors through the memory socket.

namespace gpumux {
namespace {

constexpr uint64_t kPageGranularity = uint64_t{2} << 20;

// `status` of a driver call on `device`, its message saying so.
absl::Status OnDevice(DeviceIndex device, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("CUDA device ", device.value(), ": ", status.message()));
}

}  // namespace

class CudaBackend::Page final : public ExportableMemory {
 public:
  Page(int device, cuda_vmm::PhysicalHandle handle, uint64_t size)
      : device_(device), handle_(handle), size_(size) {}
  // The last holder may be the memory socket's thread: the device is made
  // current there first, as for Export.
  ~Page() override {
    cudaSetDevice(device_);
    if (absl::Status released = cuda_vmm::Release(handle_); !released.ok()) {
      spdlog::error("CUDA device {}: releasing a page: {}", device_, released.ToString());
    }
  }
  Page(const Page&) = delete;
  Page& operator=(const Page&) = delete;

  uint64_t size() const override { return size_; }
  absl::StatusOr<UniqueFd> Export() const override {
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return CudaStatus(e, absl::StrCat("CUDA device ", device_, ": exporting a page"));
    }
    return cuda_vmm::Export(handle_);
  }

 private:
  const int device_;
  const cuda_vmm::PhysicalHandle handle_;
  const uint64_t size_;
};

absl::StatusOr<BackendRange> CudaBackend::ReserveRange(DeviceIndex device, uint64_t size,
                                                       uint64_t page_size, StreamId /*stream*/,
                                                       bool /*small_pool*/) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  if (!vmm_.ok()) return vmm_;
  if (page_size == 0 || page_size % kPageGranularity != 0 || size == 0 || size % page_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CUDA device %d: an expandable segment of %d bytes in pages of %d bytes: the page size "
        "must be a positive multiple of 2 MiB and the size a positive multiple of it",
        device.value(), size, page_size));
  }
  absl::StatusOr<uint64_t> address = cuda_vmm::ReserveAddresses(size, kPageGranularity);
  if (!address.ok()) {
    // Address space, not memory: the allocator must not free its cache for it.
    return absl::Status(absl::IsResourceExhausted(address.status()) ? absl::StatusCode::kUnavailable
                                                                    : address.status().code(),
                        absl::StrFormat("CUDA device %d: cannot reserve %d bytes of addresses for "
                                        "an expandable segment: %s",
                                        device.value(), size, address.status().message()));
  }
  Device& d = *devices_[device.value()];
  {
    absl::MutexLock lock(&d.mu);
    Range& range = d.ranges[*address];
    range.size = size;
    range.page_size = page_size;
    range.pages.resize(size / page_size);
  }
  BackendRange range{*address, size, SegmentHandle{SegmentHandle::Kind::kCudaPages, "", ""}};
  range.handle.pci_bus_id = d.info.pci_bus_id;
  return range;
}

absl::StatusOr<CudaBackend::PageSpan> CudaBackend::FindPagesLocked(Device& d, uint64_t address,
                                                                   uint64_t size, bool mapped) {
  return FindPages(d.ranges, absl::StrCat("CUDA device ", d.info.index.value()), address, size,
                   mapped, [](const MappedPage& page) { return page.page != nullptr; });
}

absl::Status CudaBackend::MapPages(DeviceIndex device, uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  Device& d = *devices_[device.value()];
  uint64_t page_size = 0;
  {
    absl::MutexLock lock(&d.mu);
    GPUMUX_ASSIGN_OR_RETURN(const PageSpan span,
                            FindPagesLocked(d, address, size, /*mapped=*/false));
    page_size = span.range->page_size;
  }
  // Made and mapped outside the lock (copies check their ranges under it);
  // the allocator maps and unmaps one device's pages one call at a time.
  // All or nothing: what was mapped here is unmapped again on a failure.
  std::vector<MappedPage> made;
  auto undo = [&](const absl::Status& status) {
    for (size_t i = 0; i < made.size(); ++i) {
      cuda_vmm::Unmap(address + i * page_size, page_size).IgnoreError();
    }
    made.clear();  // releases the allocations
    return status;
  };
  const std::vector<int> readers = Readers(device);
  for (uint64_t offset = 0; offset < size; offset += page_size) {
    absl::StatusOr<cuda_vmm::PhysicalHandle> handle = cuda_vmm::Create(device.value(), page_size);
    if (absl::IsResourceExhausted(handle.status())) {
      // Retiring segments give way to memory needed now, as for cudaMalloc.
      FreeRetiring(d, absl::InfiniteFuture());
      handle = cuda_vmm::Create(device.value(), page_size);
    }
    if (absl::IsResourceExhausted(handle.status())) {
      ResetCudaError();
      size_t free = 0;
      size_t total = 0;
      cudaMemGetInfo(&free, &total);
      return undo(absl::ResourceExhaustedError(absl::StrFormat(
          "CUDA device %d: cannot map %d bytes: %d of %d bytes free (cuMemCreate: out of memory)",
          device.value(), size, free, total)));
    }
    if (!handle.ok()) return undo(OnDevice(device, handle.status()));
    auto page = std::make_shared<const Page>(device.value(), *handle, page_size);
    if (absl::Status mapped = cuda_vmm::Map(address + offset, page_size, *handle, readers);
        !mapped.ok()) {
      return undo(OnDevice(device, mapped));
    }
    made.push_back(MappedPage{std::move(page), ""});
  }
  // Zeroed before anyone sees them: the memory may be another tenant's old data.
  cudaError_t error = cudaMemsetAsync(reinterpret_cast<void*>(address), 0, size, d.internal_stream);
  if (error == cudaSuccess) error = cudaStreamSynchronize(d.internal_stream);
  if (error != cudaSuccess) return undo(Check(device, error, "zeroing new pages"));
  if (options_.memory_files != nullptr) {
    for (MappedPage& page : made) page.key = options_.memory_files->Add(page.page);
  }
  absl::MutexLock lock(&d.mu);
  absl::StatusOr<PageSpan> span = FindPagesLocked(d, address, size, /*mapped=*/false);
  if (!span.ok()) {  // the range went meanwhile: a caller broke the allocator's order
    for (MappedPage& page : made) {
      if (!page.key.empty()) options_.memory_files->Remove(page.key);
    }
    return undo(span.status());
  }
  for (uint64_t i = 0; i < span->count; ++i) span->range->pages[span->first + i] = made[i];
  return absl::OkStatus();
}

std::vector<int> CudaBackend::Readers(DeviceIndex device) const {
  std::vector<int> readers = {device.value()};
  for (int reader = 0; reader < device_count(); ++reader) {
    if (reader != device.value() && peer_readable_[reader][device.value()]) {
      readers.push_back(reader);
    }
  }
  return readers;
}

absl::Status CudaBackend::UnmapPages(DeviceIndex device, uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  Device& d = *devices_[device.value()];
  std::vector<std::pair<uint64_t, MappedPage>> pages;
  {
    absl::MutexLock lock(&d.mu);
    GPUMUX_ASSIGN_OR_RETURN(const PageSpan span,
                            FindPagesLocked(d, address, size, /*mapped=*/true));
    for (uint64_t i = span.first; i < span.first + span.count; ++i) {
      pages.emplace_back(span.base + i * span.range->page_size,
                         std::exchange(span.range->pages[i], MappedPage()));
    }
  }
  if (absl::Status waited = AwaitWorkOn(device); !waited.ok()) {
    // The pages stay mapped, and in the books, as the allocator expects of
    // a failed unmap.
    absl::MutexLock lock(&d.mu);
    for (auto& [page_address, page] : pages) {
      if (auto it = RangeAt(d.ranges, page_address); it != d.ranges.end()) {
        it->second.pages[(page_address - it->first) / it->second.page_size] = std::move(page);
      }
    }
    return waited;
  }
  return UnmapTaken(device, pages);
}

absl::Status CudaBackend::AwaitWorkOn(DeviceIndex device) {
  // Calls that found the pages mapped have queued their work once this
  // lock is free; later calls find them gone.
  { absl::WriterMutexLock in_flight(&enqueue_mu_); }
  for (const int reader : Readers(device)) {
    GPUMUX_RETURN_IF_ERROR(Synchronize(DeviceIndex(reader)));
  }
  return UseDevice(device);
}

absl::Status CudaBackend::UnmapTaken(DeviceIndex device,
                                     const std::vector<std::pair<uint64_t, MappedPage>>& pages) {
  absl::Status status;
  for (const auto& [address, page] : pages) {
    if (absl::Status unmapped = cuda_vmm::Unmap(address, page.page->size()); !unmapped.ok()) {
      status.Update(OnDevice(device, unmapped));
    }
    if (!page.key.empty()) options_.memory_files->Remove(page.key);
  }
  return status;  // each page's memory goes with its last holder
}

absl::Status CudaBackend::ReleaseRange(DeviceIndex device, uint64_t address) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  std::vector<std::pair<uint64_t, MappedPage>> pages;
  uint64_t size = 0;
  {
    absl::MutexLock lock(&d.mu);
    auto it = d.ranges.find(address);
    if (it == d.ranges.end()) {
      return absl::NotFoundError(absl::StrFormat(
          "CUDA device %d: no expandable segment at address 0x%x", device.value(), address));
    }
    Range& range = it->second;
    size = range.size;
    for (uint64_t i = 0; i < range.pages.size(); ++i) {
      if (range.pages[i].page != nullptr) {
        pages.emplace_back(address + i * range.page_size, std::move(range.pages[i]));
      }
    }
    d.ranges.erase(it);
  }
  // A range without pages (the allocator unmaps them first) costs no wait.
  // One whose device cannot finish its work keeps its pages and addresses
  // (they leak with the device) rather than fault under that work.
  if (!pages.empty()) {
    if (absl::Status waited = AwaitWorkOn(device); !waited.ok()) {
      spdlog::error("CUDA device {}: an expandable segment's {} pages stay mapped: {}",
                    device.value(), pages.size(), std::string(waited.message()));
      return waited;
    }
  }
  absl::Status status = UnmapTaken(device, pages);
  if (status.ok()) status = OnDevice(device, cuda_vmm::FreeAddresses(address, size));
  return status;
}

absl::StatusOr<std::vector<PageHandle>> CudaBackend::PageHandles(DeviceIndex device,
                                                                 uint64_t address, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (options_.memory_files == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "CUDA device %d: this backend files no pages for other processes", device.value()));
  }
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  auto it = RangeAt(d.ranges, address);
  if (it == d.ranges.end() || size == 0 || size > it->second.size - (address - it->first)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CUDA device %d: %d bytes at 0x%x are not inside one expandable segment",
                        device.value(), size, address));
  }
  return HandlesOfPages(it->second, it->first, address - it->first, size,
                        absl::StrCat("CUDA device ", device.value()),
                        [](const MappedPage& page) { return page.page != nullptr; });
}

}  // namespace gpumux
