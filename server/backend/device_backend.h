#pragma once

// DeviceBackend: the one seam between the daemon and hardware (LevelDB's Env).
// CudaBackend drives real GPUs; HostBackend emulates devices in host shared
// memory. Everything above this interface is backend-agnostic. Implementations
// are thread-safe; per-device calls may run concurrently on different devices.

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/ids.h"

namespace gpumux {

struct DeviceInfo {
  DeviceIndex index;
  std::string name;
  uint64_t total_memory = 0;
  // Compute capability; the host backend reports 0.0.
  int major = 0;
  int minor = 0;
  // SMs; the host backend reports its worker threads.
  int multi_processor_count = 0;
};

// How another process maps a segment.
struct SegmentHandle {
  enum class Kind { kHostShm, kCudaIpc };
  Kind kind = Kind::kHostShm;
  // kHostShm: the POSIX shared-memory object name; kCudaIpc: 64 handle bytes.
  std::string data;
};

// A contiguous range of device memory obtained from the backend.
struct BackendSegment {
  uint64_t address = 0;  // device address of the first byte
  uint64_t size = 0;
  SegmentHandle handle;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // "host" or "cuda".
  virtual absl::string_view name() const = 0;
  virtual int device_count() const = 0;
  // Precondition: 0 <= device < device_count().
  virtual const DeviceInfo& device_info(DeviceIndex device) const = 0;
  // Bytes the backend could still hand out on `device` (cudaMemGetInfo's free).
  virtual uint64_t FreeMemory(DeviceIndex device) const = 0;

  // Obtains `size` bytes of zero-filled device memory that other processes can
  // map through the returned handle. INVALID_ARGUMENT for a device out of
  // range or a size that is 0 or not a multiple of 512; RESOURCE_EXHAUSTED
  // when the device has not enough free memory; other codes for backend
  // failures.
  virtual absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex device, uint64_t size) = 0;

  // Returns a segment to the device; its handle stops being mappable.
  // NOT_FOUND for an address that is not a live segment of `device`.
  virtual absl::Status ReleaseSegment(DeviceIndex device, uint64_t address) = 0;

  // Blocks until all work queued on the device has completed.
  virtual absl::Status Synchronize(DeviceIndex device) = 0;
};

}  // namespace gpumux
