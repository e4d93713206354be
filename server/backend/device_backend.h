#pragma once

// DeviceBackend: the one seam between the daemon and hardware (LevelDB's Env).
// CudaBackend drives real GPUs; HostBackend emulates devices in host shared
// memory. Everything above this interface is backend-agnostic. Implementations
// are thread-safe; per-device calls may run concurrently on different devices.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/segments/segment_source.h"
#include "common/tensor/reduce.h"
#include "common/tensor/rng_fill.h"
#include "gpumux/common/ids.h"
#include "server/backend/collective_engine.h"

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
  // "0000:19:00.0" (cudaDeviceGetPCIBusId); empty on the host backend.
  std::string pci_bus_id;
  // The CUDA architectures this binary carries, as torch.cuda.get_arch_list()
  // ("sm_80", "compute_90"), and its nvcc flags, as get_gencode_flags().
  // Empty on the host backend.
  std::vector<std::string> arch_list;
  std::string gencode_flags;
  // cudaDriverGetVersion / cudaRuntimeGetVersion (13000 for 13.0); 0 on the
  // host backend.
  int driver_version = 0;
  int runtime_version = 0;
};

// cudaDeviceGetStreamPriorityRange: numerically lower is higher priority, so
// `greatest` <= `least` (CUDA on Hopper: least 0, greatest -5).
struct StreamPriorityRange {
  int least = 0;
  int greatest = 0;
};

// AccessOnHost's answer: a host pointer to device memory, and what keeps the
// memory mapped while the caller uses it.
struct HostMemoryView {
  std::shared_ptr<const void> keep_alive;
  char* data = nullptr;
};

// A point in a stream's work that the daemon's own host code holds it at
// (DeviceBackend::HoldStream): the stream's later work waits until the hold
// is released, by Release() or on destruction. Move-only.
class StreamHold {
 public:
  StreamHold() = default;
  explicit StreamHold(absl::AnyInvocable<void() &&> release) : release_(std::move(release)) {}
  StreamHold(StreamHold&& other) noexcept : release_(std::exchange(other.release_, nullptr)) {}
  StreamHold& operator=(StreamHold&& other) noexcept {
    if (this != &other) {
      Release();
      release_ = std::exchange(other.release_, nullptr);
    }
    return *this;
  }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  ~StreamHold() { Release(); }

  // Lets the stream go on; later calls do nothing.
  void Release() {
    if (release_ != nullptr) std::exchange(release_, nullptr)();
  }

 private:
  absl::AnyInvocable<void() &&> release_;
};

// Every call below that names a stream or an event returns NOT_FOUND for a
// handle this backend did not create or has destroyed, and INVALID_ARGUMENT
// for a device out of range.
class DeviceBackend : public SegmentSource {
 public:
  ~DeviceBackend() override = default;

  // "host" or "cuda".
  virtual absl::string_view name() const = 0;
  int device_count() const override = 0;
  // Precondition: 0 <= device < device_count().
  virtual const DeviceInfo& device_info(DeviceIndex device) const = 0;
  // Bytes the backend could still hand out on `device` (cudaMemGetInfo's
  // free). INVALID_ARGUMENT for a device out of range; the CUDA error when
  // the device cannot tell (a lost context), never a made-up 0.
  absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const override = 0;
  // OK while the device works. After a sticky CUDA error (an illegal address,
  // a kernel fault, an uncorrectable ECC error) the device's context is lost
  // until the daemon restarts: this returns UNAVAILABLE saying why, and every
  // later call on the device fails the same way instead of touching it.
  virtual absl::Status DeviceHealth(DeviceIndex device) const = 0;

  // Obtains `size` bytes of zero-filled device memory that other processes can
  // map through the returned handle. INVALID_ARGUMENT for a device out of
  // range or a size that is 0 or not a multiple of 512; RESOURCE_EXHAUSTED
  // when the device has not enough free memory; other codes for backend
  // failures.
  virtual absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex device, uint64_t size) = 0;

  // Returns a segment to the device; its handle stops being mappable.
  // NOT_FOUND for an address that is not a live segment of `device`. Work
  // already queued on it still completes safely (its results are lost).
  virtual absl::Status ReleaseSegment(DeviceIndex device, uint64_t address) = 0;

  // The pages under [address, address + size) of an expandable segment, all
  // mapped, as a client maps them. INVALID_ARGUMENT when the bytes are not
  // inside mapped pages of one range; FAILED_PRECONDITION for a backend
  // without expandable segments or whose pages no other process can map.
  virtual absl::StatusOr<std::vector<PageHandle>> PageHandles(DeviceIndex device,
                                                              uint64_t /*address*/,
                                                              uint64_t /*size*/) {
    return absl::FailedPreconditionError(absl::StrCat(name(), " backend, device ", device.value(),
                                                      ": no expandable segments to share"));
  }

  // SegmentSource's names for the calls above, as the allocator makes them.
  uint64_t TotalMemory(DeviceIndex device) const final { return device_info(device).total_memory; }
  absl::StatusOr<BackendSegment> ObtainSegment(DeviceIndex device, uint64_t size,
                                               StreamId /*stream*/, bool /*small_pool*/) final {
    return AllocateSegment(device, size);
  }
  absl::Status ReturnSegment(DeviceIndex device, uint64_t address) final {
    return ReleaseSegment(device, address);
  }

  // Blocks until all work queued on the device's streams (including destroyed
  // streams that still drain) has completed.
  virtual absl::Status Synchronize(DeviceIndex device) = 0;

  // --- Streams: ordered queues of work on one device. Work on one stream
  // completes in order; different streams run independently. ---

  // Precondition: 0 <= device < device_count().
  virtual StreamPriorityRange GetStreamPriorityRange(DeviceIndex device) const = 0;
  // `priority` must lie in the device's range (callers clamp, as PyTorch
  // does); INVALID_ARGUMENT otherwise.
  virtual absl::StatusOr<BackendStream> CreateStream(DeviceIndex device, int priority) = 0;
  // Returns at once (cudaStreamDestroy); work already queued still completes.
  // The handle is invalid afterwards.
  virtual absl::Status DestroyStream(BackendStream stream) = 0;
  // True when all work queued so far has completed.
  virtual absl::StatusOr<bool> QueryStream(BackendStream stream) = 0;
  // Blocks until all work queued before the call has completed.
  virtual absl::Status SynchronizeStream(BackendStream stream) = 0;

  // --- Events: completion markers recorded on streams. ---

  // INVALID_ARGUMENT for interprocess together with enable_timing.
  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override = 0;
  // Work already queued that records or waits on the event is unaffected.
  absl::Status DestroyEvent(BackendEvent event) override = 0;
  // Captures the work queued on `stream` so far (cudaEventRecord); the event
  // completes when that work has. Re-recording replaces the capture.
  // INVALID_ARGUMENT when event and stream are on different devices.
  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override = 0;
  // True when the captured work completed, or the event was never recorded.
  absl::StatusOr<bool> QueryEvent(BackendEvent event) override = 0;
  // Blocks until the captured work completed; returns at once if never
  // recorded. UNAVAILABLE when AbandonInterprocessWaits gave up the wait.
  absl::Status SynchronizeEvent(BackendEvent event) override = 0;
  // Later work on `stream` waits for the event's work as captured at this
  // call (cudaStreamWaitEvent); a never-recorded event adds no wait. Stream
  // and event may be on different devices.
  virtual absl::Status StreamWaitEvent(BackendStream stream, BackendEvent event) = 0;
  // Milliseconds between two completed timing events. FAILED_PRECONDITION
  // when either lacks enable_timing, was never recorded, or has not completed.
  virtual absl::StatusOr<float> ElapsedTimeMs(BackendEvent start, BackendEvent end) = 0;
  // kIpcEventHandleBytes bytes another process opens the event with.
  // FAILED_PRECONDITION unless the event is interprocess.
  virtual absl::StatusOr<std::string> GetIpcEventHandle(BackendEvent event) = 0;
  // Opens an interprocess event created here or in another process, as an
  // event of `device`; both sides may record and wait on it. INVALID_ARGUMENT
  // for a handle of the wrong size or kind, one that names no event, or one
  // of an event this backend made on another device; NOT_FOUND when the
  // event no longer exists.
  virtual absl::StatusOr<BackendEvent> OpenIpcEventHandle(DeviceIndex device,
                                                          absl::string_view handle) = 0;

  // --- Work on streams. Each call only queues the work. Device addresses
  // must lie, with all `bytes` after them, inside one live segment of the
  // named device (for calls that name none: the stream's device);
  // INVALID_ARGUMENT otherwise (callers check allocation bounds first). Zero
  // bytes queue nothing. Host buffers must stay valid until the work
  // completes: `keep_alive` (may be null) is released after it ran. ---

  // Overlapping source and destination ranges are allowed (memmove).
  virtual absl::Status CopyDeviceToDevice(BackendStream stream, DeviceIndex dst_device,
                                          uint64_t dst, DeviceIndex src_device, uint64_t src,
                                          uint64_t bytes) = 0;
  virtual absl::Status CopyHostToDevice(BackendStream stream, uint64_t dst, const void* src,
                                        uint64_t bytes, std::shared_ptr<const void> keep_alive) = 0;
  virtual absl::Status CopyDeviceToHost(BackendStream stream, void* dst, uint64_t src,
                                        uint64_t bytes, std::shared_ptr<void> keep_alive) = 0;
  virtual absl::Status Memset(BackendStream stream, uint64_t dst, uint8_t value,
                              uint64_t bytes) = 0;
  // Fills `request.elements` values at `dst` with common/tensor/philox.h's stream
  // for (seed, offset): the same bits on every backend for uniform and raw.
  // INVALID_ARGUMENT when `request` fails ValidateRngRequest or `offset` is
  // not a multiple of 4. The caller advances its generator offset.
  virtual absl::Status FillRandom(BackendStream stream, uint64_t dst, const RngRequest& request,
                                  uint64_t seed, uint64_t offset) = 0;

  // Copies `rows` runs of `row_bytes` bytes, run r from src + r * src_pitch
  // to dst + r * dst_pitch (cudaMemcpy2DAsync): a chunk of a tensor along
  // an inner dimension. Either device may differ from the stream's. The
  // ranges must not overlap; INVALID_ARGUMENT for a pitch below row_bytes.
  virtual absl::Status CopyDeviceToDevice2D(BackendStream stream, DeviceIndex dst_device,
                                            uint64_t dst, uint64_t dst_pitch,
                                            DeviceIndex src_device, uint64_t src,
                                            uint64_t src_pitch, uint64_t row_bytes,
                                            uint64_t rows) = 0;
  // Whether work on `device`'s streams can read memory of `peer` directly
  // (Reduce's `src_device`): always for peer == device; across devices on
  // the host backend, and on CUDA where peer access is enabled.
  virtual bool CanReadPeer(DeviceIndex device, DeviceIndex peer) const = 0;
  // dst[i] = op(dst[i], src[i]) for `count` elements of `dtype` with
  // common/tensor/reduce.h's steps (kAvg adds), `dst` on the stream's device and
  // `src` on `src_device` (CanReadPeer must allow it: INVALID_ARGUMENT
  // otherwise). The ranges are the same or do not overlap.
  virtual absl::Status Reduce(BackendStream stream, ReduceOp op, RngDtype dtype, uint64_t dst,
                              DeviceIndex src_device, uint64_t src, uint64_t count) = 0;
  // common/tensor/reduce.h's FinishAverage over `count` elements at `data` on the
  // stream's device.
  virtual absl::Status FinishAverage(BackendStream stream, RngDtype dtype, uint64_t data,
                                     uint64_t count, int ranks) = 0;

  // For shutdown: from now on no wait depends on another process. Waits on
  // interprocess events that other processes have not completed (queued
  // StreamWaitEvent work, SynchronizeEvent, and so SynchronizeStream behind
  // them) give up instead of blocking; everything else still runs.
  virtual void AbandonInterprocessWaits() = 0;

  // Pins host memory for fast transfers (cudaHostRegister). INVALID_ARGUMENT
  // for null data or zero bytes; ALREADY_EXISTS when `data` is already
  // pinned. Unpin (NOT_FOUND unless `data` was pinned) before the memory is
  // unmapped.
  virtual absl::Status PinHostMemory(void* data, uint64_t bytes) = 0;
  virtual absl::Status UnpinHostMemory(void* data) = 0;

  // --- Work the daemon does on device memory itself, from its own threads
  // rather than on a stream (a group collective over TCP). ---

  // Whether device memory is host memory the daemon can read and write in
  // place (the host backend); CUDA's is not.
  virtual bool memory_on_host() const = 0;
  // A host pointer to [address, address + bytes) on `device`, valid while the
  // view lives. FAILED_PRECONDITION unless memory_on_host(); INVALID_ARGUMENT
  // for a bad device or a range not inside one live segment. The caller
  // orders its use against the streams' work (synchronize first) and keeps
  // the allocation from being freed meanwhile
  // (MemoryManager::HoldAllocations).
  virtual absl::StatusOr<HostMemoryView> AccessOnHost(DeviceIndex device, uint64_t address,
                                                      uint64_t bytes) = 0;
  // Holds `stream` for such work queued in its order (a group collective
  // that the caller does not wait for): `reached` runs once every item queued
  // on the stream before the hold finished (on a stream thread: it must not
  // block), and work queued after the hold waits until it is released.
  // FAILED_PRECONDITION unless memory_on_host() (CUDA streams cannot wait on
  // the host without blocking a driver thread).
  virtual absl::StatusOr<StreamHold> HoldStream(BackendStream stream,
                                                absl::AnyInvocable<void() &&> reached) = 0;

  // The engine for collectives across this backend's devices in one call
  // (NCCL on CUDA where libnccl loaded), owned by the backend; null where
  // there is none (the host backend, CUDA without NCCL): CommWork then uses
  // copies and Reduce.
  virtual CollectiveEngine* collectives() = 0;
};

}  // namespace gpumux
