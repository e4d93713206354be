#include "client/segment_mapper.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cuda_ipc_mapping.h"
#include "client/page_book.h"
#include "common/base/status_macros.h"
#include "gpumux/common/sealed_memory.h"

namespace gpumux {
namespace {

// A host-backend segment: its memory file, mapped read-write.
class MemoryFileSegment final : public MappedSegment {
 public:
  explicit MemoryFileSegment(MemoryMapping mapping) : mapping_(std::move(mapping)) {}
  void* base() const override { return mapping_.data(); }
  uint64_t size() const override { return mapping_.size(); }

 private:
  MemoryMapping mapping_;
};

// A host-backend expandable segment: its range reserved here, its pages'
// memory files mapped into it at their offsets.
class HostPagedSegment final : public PagedMapping {
 public:
  explicit HostPagedSegment(AddressReservation reservation)
      : reservation_(std::move(reservation)) {}
  void* base() const override { return reservation_.data(); }
  uint64_t size() const override { return reservation_.size(); }

  absl::Status MapPages(const SegmentMapper::PageHandles& pages,
                        MemoryFileFetcher* memory_files) override {
    for (const v1::PageHandle& page : pages) {
      const std::string* mapped = book_.KeyAt(page.offset());
      if (mapped != nullptr && *mapped == page.key()) continue;
      GPUMUX_ASSIGN_OR_RETURN(SealedMemory memory, memory_files->Fetch(page.key(), page.size()));
      GPUMUX_RETURN_IF_ERROR(reservation_.MapAt(page.offset(), memory));
      book_.Mapped(page.offset(), page.key(), page.size());  // the mapping keeps the file
    }
    return absl::OkStatus();
  }

  void UnmapPages(uint64_t offset, uint64_t size) override {
    for (const auto& [page, bytes] : book_.Unmapped(offset, size)) {
      reservation_.Hole(page, bytes).IgnoreError();  // in range: it was mapped there
    }
  }

 private:
  AddressReservation reservation_;
  PageBook book_;
};

// Maps an allocation's `pages` into `mapping` when it is an expandable
// segment's; allocations of other segments bring none, and cost no cast.
absl::Status MapPagesInto(MappedSegment* mapping, const SegmentMapper::PageHandles* pages,
                          MemoryFileFetcher* memory_files) {
  if (pages == nullptr || pages->empty()) return absl::OkStatus();
  auto* paged = dynamic_cast<PagedMapping*>(mapping);
  return paged == nullptr ? absl::OkStatus() : paged->MapPages(*pages, memory_files);
}

absl::StatusOr<std::unique_ptr<MappedSegment>> OpenMapping(const v1::SegmentHandle& handle,
                                                           uint64_t size,
                                                           MemoryFileFetcher* memory_files) {
  switch (handle.kind()) {
    case v1::HANDLE_KIND_HOST_MEMFD: {
      if (memory_files == nullptr) {
        return NoMemorySocketError();
      }
      GPUMUX_ASSIGN_OR_RETURN(SealedMemory memory, memory_files->Fetch(handle.data(), size));
      GPUMUX_ASSIGN_OR_RETURN(MemoryMapping mapping, memory.Map());
      return std::unique_ptr<MappedSegment>(new MemoryFileSegment(std::move(mapping)));
    }
    case v1::HANDLE_KIND_CUDA_IPC:
      return OpenCudaIpcMapping(handle.data(), size, handle.pci_bus_id());
    case v1::HANDLE_KIND_HOST_PAGES: {
      if (memory_files == nullptr) return NoMemorySocketError();
      GPUMUX_ASSIGN_OR_RETURN(AddressReservation reservation, AddressReservation::Reserve(size));
      return std::unique_ptr<MappedSegment>(new HostPagedSegment(std::move(reservation)));
    }
    case v1::HANDLE_KIND_CUDA_PAGES:
      if (memory_files == nullptr) return NoMemorySocketError();
      return OpenCudaPagedMapping(size, handle.pci_bus_id());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("segment handle of unknown kind ", static_cast<int>(handle.kind())));
  }
}

}  // namespace

SegmentMapper::~SegmentMapper() { UnmapAll(); }

absl::StatusOr<void*> SegmentMapper::Map(DeviceIndex device, SegmentId segment,
                                         const v1::SegmentHandle& handle, uint64_t size,
                                         MemoryFileFetcher* memory_files, int* cuda_device,
                                         const PageHandles* pages) {
  const Key key(device, segment);
  absl::MutexLock lock(&mu_);
  auto failed = [&](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("cannot map segment ", ToString(segment), " of device ",
                                     ToString(device), ": ", status.message()));
  };
  if (auto it = mappings_.find(key); it != mappings_.end()) {
    if (absl::Status status = MapPagesInto(it->second.mapping.get(), pages, memory_files);
        !status.ok()) {
      return failed(status);
    }
    if (cuda_device != nullptr) *cuda_device = it->second.mapping->cuda_device();
    ++it->second.users;
    return it->second.mapping->base();
  }
  // Mapping under the lock keeps two threads from mapping one segment twice;
  // a fetch and an mmap take microseconds.
  auto mapping = OpenMapping(handle, size, memory_files);
  if (!mapping.ok()) return failed(mapping.status());
  if (absl::Status status = MapPagesInto(mapping->get(), pages, memory_files); !status.ok()) {
    return failed(status);
  }
  void* base = (*mapping)->base();
  if (cuda_device != nullptr) *cuda_device = (*mapping)->cuda_device();
  mappings_.emplace(key, Entry{.mapping = std::move(mapping).value(), .users = 1});
  ++opened_;
  return base;
}

void SegmentMapper::Unmap(DeviceIndex device, SegmentId segment) {
  std::unique_ptr<MappedSegment> doomed;
  {
    absl::MutexLock lock(&mu_);
    auto it = mappings_.find(Key(device, segment));
    if (it == mappings_.end()) return;
    doomed = std::move(it->second.mapping);
    mappings_.erase(it);
  }
  // `doomed` unmaps here, outside the lock.
}

void SegmentMapper::UnmapPages(DeviceIndex device, SegmentId segment, uint64_t offset,
                               uint64_t size) {
  absl::MutexLock lock(&mu_);
  auto it = mappings_.find(Key(device, segment));
  if (it == mappings_.end()) return;
  if (auto* paged = dynamic_cast<PagedMapping*>(it->second.mapping.get()); paged != nullptr) {
    paged->UnmapPages(offset, size);
  }
}

void SegmentMapper::UnmapAll() {
  absl::flat_hash_map<Key, Entry> doomed;
  {
    absl::MutexLock lock(&mu_);
    doomed.swap(mappings_);
  }
}

void SegmentMapper::Release(DeviceIndex device, SegmentId segment) {
  absl::MutexLock lock(&mu_);
  auto it = mappings_.find(Key(device, segment));
  if (it != mappings_.end() && it->second.users > 0) --it->second.users;
}

SegmentMapper::Unmapped SegmentMapper::UnmapUnused() {
  std::vector<std::unique_ptr<MappedSegment>> doomed;
  Unmapped unmapped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = mappings_.begin(); it != mappings_.end();) {
      if (it->second.users != 0) {
        ++it;
        continue;
      }
      ++unmapped.mappings;
      unmapped.bytes += it->second.mapping->size();
      doomed.push_back(std::move(it->second.mapping));
      mappings_.erase(it++);
    }
  }
  return unmapped;  // `doomed` unmaps here, outside the lock
}

uint64_t SegmentMapper::opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

size_t SegmentMapper::size() const {
  absl::MutexLock lock(&mu_);
  return mappings_.size();
}

}  // namespace gpumux
