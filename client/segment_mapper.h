#pragma once

// Maps each segment the daemon hands this client once and caches the mapping
// by (device, segment id); an allocation's pointer is then the mapping's base
// plus its offset (DESIGN §6). The daemon announces a released segment on the
// session stream and the client drops its mapping here. Segment ids are never
// reused by the daemon, so a stale cache entry cannot alias a new segment.
// Thread-safe.

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/mapped_segment.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/common/ids.h"
#include "gpumux/v1/common.pb.h"

namespace gpumux {

class SegmentMapper {
 public:
  using PageHandles = google::protobuf::RepeatedPtrField<v1::PageHandle>;

  SegmentMapper() = default;
  // Unmaps everything still mapped.
  ~SegmentMapper();
  SegmentMapper(const SegmentMapper&) = delete;
  SegmentMapper& operator=(const SegmentMapper&) = delete;

  // The base of segment (device, segment) in this process, mapping it from
  // `handle` (`size` bytes) on first use. Errors, nothing cached: INVALID_ARGUMENT
  // for a handle of unspecified or unknown kind; UNIMPLEMENTED for a CUDA IPC
  // handle in a build without CUDA (the allocation itself is fine, it just has
  // no pointer here); FAILED_PRECONDITION for a host handle without
  // `memory_files` (a TCP connection); MemoryFileFetcher::Fetch's and mmap's
  // errors.
  // `cuda_device` (may be null) receives MappedSegment::cuda_device() of the
  // mapping. Each successful call counts one more user of the mapping, until
  // Release.
  //
  // An expandable segment (HANDLE_KIND_HOST_PAGES, HANDLE_KIND_CUDA_PAGES)
  // is a reservation of `size` bytes into which `pages` (those under one
  // allocation) are mapped at their offsets, each fetched once; a page the
  // daemon unmapped and mapped anew (another key at the offset) is fetched
  // again. CUDA pages need a CUDA-enabled build (UNIMPLEMENTED otherwise).
  absl::StatusOr<void*> Map(DeviceIndex device, SegmentId segment, const v1::SegmentHandle& handle,
                            uint64_t size, MemoryFileFetcher* memory_files,
                            int* cuda_device = nullptr, const PageHandles* pages = nullptr);

  // The daemon unmapped the pages [offset, offset + size) of an expandable
  // segment: they become inaccessible here too. Nothing happens for a
  // segment not mapped or not expandable.
  void UnmapPages(DeviceIndex device, SegmentId segment, uint64_t offset, uint64_t size);

  // Unmaps the segment; nothing happens when it is not mapped. Pointers into
  // it dangle afterwards.
  void Unmap(DeviceIndex device, SegmentId segment);
  void UnmapAll();
  // One user of the segment's mapping (a successful Map) is done with it;
  // nothing happens when it is not mapped.
  void Release(DeviceIndex device, SegmentId segment);

  struct Unmapped {
    uint64_t mappings = 0;
    uint64_t bytes = 0;
  };
  // Unmaps every mapping without users (torch.cuda.ipc_collect) and says how
  // many, of how many bytes.
  Unmapped UnmapUnused();

  // How many segments are mapped now.
  size_t size() const;
  // How many mappings were ever opened (each a memory file fetched and
  // mapped, or a cudaIpcOpenMemHandle); Map calls beyond these hit the cache.
  uint64_t opened() const;

 private:
  using Key = std::pair<DeviceIndex, SegmentId>;
  struct Entry {
    std::unique_ptr<MappedSegment> mapping;
    // Successful Map calls not yet Released.
    uint64_t users = 0;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> mappings_ ABSL_GUARDED_BY(mu_);
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpumux
