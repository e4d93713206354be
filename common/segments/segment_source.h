#pragma once

// SegmentSource: what PyTorch's caching allocator (allocator/) needs from
// whatever gives it memory: segments of device memory and completion events
// on streams. The daemon's DeviceBackend is one (it hands out real device
// memory); the client's lease source is another (it leases segments from the
// daemon, so the client runs the same allocator in its own process). Also the
// value types both sides name: segment handles, streams and events.
// Implementations are thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpumux/common/ids.h"

namespace gpumux {

// How another process maps a segment.
struct SegmentHandle {
  // kHostPages, kCudaPages: an expandable segment's range on the host or
  // CUDA backend, mapped page by page (each allocation brings the
  // PageHandles of its pages).
  enum class Kind { kHostMemfd, kCudaIpc, kHostPages, kCudaPages };
  Kind kind = Kind::kHostMemfd;
  // kHostMemfd: the MemoryFileTable key of the segment's memory file;
  // kCudaIpc: 64 handle bytes; kHostPages, kCudaPages: empty.
  std::string data;
  // kCudaIpc, kCudaPages: the PCI bus id of the segment's device; empty on
  // the host backend.
  std::string pci_bus_id;
};

// A contiguous range of device memory obtained from the backend.
struct BackendSegment {
  uint64_t address = 0;  // device address of the first byte
  uint64_t size = 0;
  SegmentHandle handle;
};

// A reserved range of device addresses with no memory behind it until pages
// are mapped into it (an expandable segment's).
struct BackendRange {
  uint64_t address = 0;
  uint64_t size = 0;
  SegmentHandle handle;
};

// One mapped page of an expandable segment as another process maps it: at
// `offset` from the range's start, `size` bytes, the MemoryFileTable key of
// its memory file (host) or exportable device memory (CUDA).
struct PageHandle {
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string key;
};

// Backend streams and events, named by opaque handles the backend assigns
// (never 0, never reused by one backend object).
using BackendStream = StrongId<struct BackendStreamTag, uint64_t>;
using BackendEvent = StrongId<struct BackendEventTag, uint64_t>;

// torch.cuda.Event's flags (note: timing is off by default, as in torch, not
// as in cudaEventDefault). `blocking` asks SynchronizeEvent to sleep rather
// than spin (cudaEventBlockingSync). An interprocess event cannot also time
// (CUDA requires cudaEventDisableTiming with cudaEventInterprocess).
struct EventFlags {
  bool enable_timing = false;
  bool blocking = false;
  bool interprocess = false;
};

// Size of an interprocess event handle (cudaIpcEventHandle_t's 64 bytes).
inline constexpr size_t kIpcEventHandleBytes = 64;

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;

  virtual int device_count() const = 0;
  // The device's memory in bytes (cudaMemGetInfo's total).
  // Precondition: 0 <= device < device_count().
  virtual uint64_t TotalMemory(DeviceIndex device) const = 0;
  // Bytes that could still be handed out on `device`, or why that is unknown.
  virtual absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const = 0;

  // A new segment of `size` bytes (a multiple of 512) for work on `stream`,
  // as the allocator's client names it, for its small pool (PyTorch's 2 MiB
  // segments of blocks up to 1 MiB) or its large one. RESOURCE_EXHAUSTED when the memory
  // is not there (the allocator then frees its cache and retries); other
  // codes pass through to the allocator's caller.
  virtual absl::StatusOr<BackendSegment> ObtainSegment(DeviceIndex device, uint64_t size,
                                                       StreamId stream, bool small_pool) = 0;
  // Gives back a segment from ObtainSegment, named by its address.
  virtual absl::Status ReturnSegment(DeviceIndex device, uint64_t address) = 0;

  // Expandable segments (PyTorch's cuMemAddressReserve + cuMemCreate/cuMemMap
  // on demand). A source that has them says so here; the allocator calls the
  // four methods below only then, and the others answer FAILED_PRECONDITION.
  virtual bool SupportsExpandableSegments() const { return false; }
  // Reserves `size` bytes of addresses, a multiple of `page_size` (itself a
  // multiple of 2 MiB), for the expandable segment of one stream and pool;
  // nothing is mapped yet and no memory counts as used.
  virtual absl::StatusOr<BackendRange> ReserveRange(DeviceIndex device, uint64_t size,
                                                    uint64_t page_size, StreamId stream,
                                                    bool small_pool);
  // Maps zero-filled memory under the unmapped pages [address, address +
  // size) of a reserved range (page-aligned), all of them or none:
  // RESOURCE_EXHAUSTED when the memory is not there.
  virtual absl::Status MapPages(DeviceIndex device, uint64_t address, uint64_t size);
  // Unmaps the mapped pages [address, address + size) of a reserved range,
  // returning their memory to the device.
  virtual absl::Status UnmapPages(DeviceIndex device, uint64_t address, uint64_t size);
  // Gives back a range from ReserveRange, named by its address, with any
  // pages still mapped in it.
  virtual absl::Status ReleaseRange(DeviceIndex device, uint64_t address);

  // Events on streams, as DeviceBackend documents them (device_backend.h).
  virtual absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) = 0;
  virtual absl::Status DestroyEvent(BackendEvent event) = 0;
  virtual absl::Status RecordEvent(BackendEvent event, BackendStream stream) = 0;
  virtual absl::StatusOr<bool> QueryEvent(BackendEvent event) = 0;
  virtual absl::Status SynchronizeEvent(BackendEvent event) = 0;
};

}  // namespace gpumux
