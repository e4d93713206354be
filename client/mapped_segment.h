#pragma once

// A segment of daemon-owned device memory mapped into this process: an RAII
// owner of one mapping. Which kind depends on the segment handle the daemon
// sends at run time (host shared memory, CUDA IPC, an expandable segment's
// pages of either), hence the interface. Implementations are immutable after
// construction and thread-safe, but for PagedMapping's page calls.

#include <cstdint>

#include "absl/status/status.h"
#include "gpumux/v1/common.pb.h"

namespace gpumux {

class MemoryFileFetcher;

class MappedSegment {
 public:
  virtual ~MappedSegment() = default;

  // Where the segment starts in this process: a host pointer for shared
  // memory, a device pointer for CUDA IPC. Valid until destruction.
  virtual void* base() const = 0;
  // The mapped length in bytes.
  virtual uint64_t size() const = 0;
  // The CUDA device ordinal (in this process) a CUDA IPC mapping is open on;
  // -1 for host memory.
  virtual int cuda_device() const { return -1; }
};

// An expandable segment's mapping: its range reserved whole, its pages
// mapped into it at their offsets as allocations bring them. Its owner
// (SegmentMapper) serializes the calls.
class PagedMapping : public MappedSegment {
 public:
  // Maps each page not mapped here under its key yet, fetching it from
  // `memory_files`.
  virtual absl::Status MapPages(const google::protobuf::RepeatedPtrField<v1::PageHandle>& pages,
                                MemoryFileFetcher* memory_files) = 0;
  // The daemon unmapped [offset, offset + size): those pages become
  // inaccessible here too.
  virtual void UnmapPages(uint64_t offset, uint64_t size) = 0;
};

}  // namespace gpumux
