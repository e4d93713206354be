#pragma once

// A segment of daemon-owned device memory mapped into this process: an RAII
// owner of one mapping. Which kind depends on the segment handle the daemon
// sends at run time (host shared memory now, CUDA IPC later), hence the
// interface. Implementations are immutable after construction and thread-safe.

#include <cstdint>

namespace gpumux {

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

}  // namespace gpumux
