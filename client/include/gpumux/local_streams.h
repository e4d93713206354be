#pragma once

// LocalStreams: the streams this process's own device work runs on (its
// CUDA streams on a GPU), as the local allocator needs them. PyTorch's
// allocator orders reuse by them: a block freed on the stream it was
// allocated for is reused there at once (the stream runs its work in order,
// so that is safe); a block other streams used waits for events recorded on
// those; memory that leaves the process (a lease or a page back to the
// daemon) waits until the streams that used it finished. This is the seam
// between that code and the device, as LevelDB's Env is for files: the CUDA
// implementation runs on real streams and events, the host one
// (host_local_streams.h) on emulated streams whose work completes late, so
// the same allocator code is tested without a GPU.
//
// Streams are named by opaque keys (a cudaStream_t's value on CUDA; any
// number on the host); events are created by the allocator, which pools
// them. Implementations are thread-safe.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpumux/common/ids.h"

namespace gpumux {

// One of this process's streams on a device (with the device: the same key
// on two devices names two streams).
using LocalStream = StrongId<struct LocalStreamTag, uint64_t>;
using LocalEventId = StrongId<struct LocalEventTag, uint64_t>;

class LocalStreams {
 public:
  virtual ~LocalStreams() = default;

  // A new event on `device` (no timing). Errors: the device's.
  virtual absl::StatusOr<LocalEventId> CreateEvent(DeviceIndex device) = 0;
  // Never fails: an unknown event is ignored.
  virtual void DestroyEvent(LocalEventId event) = 0;
  // Captures the work queued on `stream` so far (cudaEventRecord). The event
  // must have been created on `device`.
  virtual absl::Status RecordEvent(LocalEventId event, DeviceIndex device, LocalStream stream) = 0;
  // True once the captured work completed; an event never recorded is
  // complete. Must not be called while a stream of the event's device is
  // capturing a graph (CUDA forbids it: FAILED_PRECONDITION).
  virtual absl::StatusOr<bool> QueryEvent(LocalEventId event) = 0;
  // Returns once the captured work completed. Same precondition.
  virtual absl::Status SynchronizeEvent(LocalEventId event) = 0;
  // Returns once the work queued on `stream` so far completed. Same
  // precondition.
  virtual absl::Status SynchronizeStream(DeviceIndex device, LocalStream stream) = 0;
  // Whether work queued on `stream` now is captured into a CUDA graph
  // instead of running (torch.cuda.graph): the allocator then neither
  // queries nor waits, and takes no new memory.
  virtual bool Capturing(DeviceIndex device, LocalStream stream) = 0;
  // Queues emulated work on `stream` that completes `duration` after now,
  // or after the work before it on the stream, whichever is later (what
  // `gpumux replay --emulate-gpu-lag` puts before each free).
  // FAILED_PRECONDITION where streams are real (CUDA).
  virtual absl::Status EnqueueWork(DeviceIndex device, LocalStream stream,
                                   absl::Duration duration) = 0;
};

}  // namespace gpumux
