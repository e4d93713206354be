#pragma once

// HostBackend: emulated devices in host memory for machines without a GPU.
// A segment is a sealed memory file (gpumux/common/sealed_memory.h: anonymous,
// zero-filled, backed in full when created, so running out of memory is
// RESOURCE_EXHAUSTED here and never a SIGBUS later, and sealed so nobody can
// resize it) filed in the MemoryFileTable under the key its handle carries;
// sessions fetch it from the daemon's memory socket. Releasing it removes
// the entry; processes that mapped it keep their mappings. Device addresses come from a per-device
// emulated address range, handed out first-fit with 2 MiB alignment so that
// released ranges are reused as cudaMalloc tends to.
//
// Streams are FIFO queues (HostStream) that one pool of worker threads per
// backend runs (HostStreamPool; see there for priority and for waits, which
// park a stream instead of holding a thread), so threads do not grow with
// streams. Copies, memset and random fills
// translate device addresses through the device's segment table, mapping a
// segment into this process on first use (SegmentMapping) and dropping the
// mapping when the segment is released and no queued work needs it. Events
// are HostEvents; interprocess ones live in shared memory (HostIpcEvent) so
// other processes record and wait on them without the daemon. A record made
// by a process that then died before completing it counts as complete (and
// is logged once), so a stream waiting on it (StreamWaitEvent) drains and
// SynchronizeEvent returns: the work it stood for died with the process.
// Every wait sleeps (condition variable or futex), so EventFlags::blocking
// changes nothing here. DestroyStream returns at once, as cudaStreamDestroy does; the
// pool still runs what the stream had queued.
//
// Thread-safe: the segment table is locked per device, the stream and event
// tables by one lock held only for lookups; nothing blocks under it.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/segments/emulated_address_space.h"
#include "common/segments/page_ranges.h"
#include "gpumux/common/sealed_memory.h"
#include "server/backend/device_backend.h"
#include "server/backend/host/host_event.h"
#include "server/backend/host/host_stream.h"
#include "server/backend/host/host_stream_pool.h"
#include "server/backend/host/segment_mapping.h"
#include "server/backend/memory_file_table.h"

namespace gpumux {

class HostBackend final : public DeviceBackend {
 public:
  struct Options {
    int device_count = 2;
    uint64_t device_memory = uint64_t{8} << 30;
    // Where segments and interprocess events are filed for the memory
    // socket; must outlive the backend. Null: the backend keeps its own
    // (memory_files() gives it), as tests without a daemon do.
    MemoryFileTable* memory_files = nullptr;
    // Worker threads running all streams' work (HostStreamPool); streams
    // beyond it take turns. Parked waits hold none.
    int stream_workers = 8;
    // False: segments are device addresses only, with no memory behind them
    // and an empty handle, for replaying allocation traces of a 141 GiB
    // device without its memory. Copies, memsets and fills into them are
    // FAILED_PRECONDITION.
    bool backed = true;
  };

  // Fails with INVALID_ARGUMENT for device_count outside [1, 1024],
  // device_memory outside [2 MiB, 4 TiB] (each device's emulated address span),
  // or stream_workers outside [1, 256].
  static absl::StatusOr<std::unique_ptr<HostBackend>> Create(const Options& options);
  // Runs all queued work to completion (queued waits on interprocess events
  // that live processes never complete are given up), then removes every
  // segment and interprocess event still held from the table.
  ~HostBackend() override;

  absl::string_view name() const override { return "host"; }
  MemoryFileTable& memory_files() const { return *memory_files_; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  const DeviceInfo& device_info(DeviceIndex device) const override;
  absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const override;
  // Emulated devices have no sticky errors: OK for every device in range.
  absl::Status DeviceHealth(DeviceIndex device) const override { return CheckDevice(device); }
  absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex device, uint64_t size) override;
  absl::Status ReleaseSegment(DeviceIndex device, uint64_t address) override;
  // Expandable segments (host_backend_ranges.cc): ranges of emulated
  // addresses; each page, when backed, a sealed memory file of its own filed
  // in memory_files() and mapped at its offset into the range's mapping in
  // this process. Unbacked, only the bytes are counted.
  bool SupportsExpandableSegments() const override { return true; }
  absl::StatusOr<BackendRange> ReserveRange(DeviceIndex device, uint64_t size, uint64_t page_size,
                                            StreamId stream, bool small_pool) override;
  absl::Status MapPages(DeviceIndex device, uint64_t address, uint64_t size) override;
  absl::Status UnmapPages(DeviceIndex device, uint64_t address, uint64_t size) override;
  absl::Status ReleaseRange(DeviceIndex device, uint64_t address) override;
  // Unbacked, FAILED_PRECONDITION: there is no memory to share.
  absl::StatusOr<std::vector<PageHandle>> PageHandles(DeviceIndex device, uint64_t address,
                                                      uint64_t size) override;
  absl::Status Synchronize(DeviceIndex device) override;

  StreamPriorityRange GetStreamPriorityRange(DeviceIndex device) const override;
  // Least 0, greatest -5, as on Hopper.
  absl::StatusOr<BackendStream> CreateStream(DeviceIndex device, int priority) override;
  absl::Status DestroyStream(BackendStream stream) override;
  absl::StatusOr<bool> QueryStream(BackendStream stream) override;
  absl::Status SynchronizeStream(BackendStream stream) override;

  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override;
  absl::Status DestroyEvent(BackendEvent event) override;
  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override;
  absl::StatusOr<bool> QueryEvent(BackendEvent event) override;
  absl::Status SynchronizeEvent(BackendEvent event) override;
  absl::Status StreamWaitEvent(BackendStream stream, BackendEvent event) override;
  absl::StatusOr<float> ElapsedTimeMs(BackendEvent start, BackendEvent end) override;
  absl::StatusOr<std::string> GetIpcEventHandle(BackendEvent event) override;
  absl::StatusOr<BackendEvent> OpenIpcEventHandle(DeviceIndex device,
                                                  absl::string_view handle) override;

  absl::Status CopyDeviceToDevice(BackendStream stream, DeviceIndex dst_device, uint64_t dst,
                                  DeviceIndex src_device, uint64_t src, uint64_t bytes) override;
  absl::Status CopyHostToDevice(BackendStream stream, uint64_t dst, const void* src, uint64_t bytes,
                                std::shared_ptr<const void> keep_alive) override;
  absl::Status CopyDeviceToHost(BackendStream stream, void* dst, uint64_t src, uint64_t bytes,
                                std::shared_ptr<void> keep_alive) override;
  absl::Status Memset(BackendStream stream, uint64_t dst, uint8_t value, uint64_t bytes) override;
  absl::Status FillRandom(BackendStream stream, uint64_t dst, const RngRequest& request,
                          uint64_t seed, uint64_t offset) override;
  absl::Status CopyDeviceToDevice2D(BackendStream stream, DeviceIndex dst_device, uint64_t dst,
                                    uint64_t dst_pitch, DeviceIndex src_device, uint64_t src,
                                    uint64_t src_pitch, uint64_t row_bytes, uint64_t rows) override;
  bool CanReadPeer(DeviceIndex device, DeviceIndex peer) const override;
  absl::Status Reduce(BackendStream stream, ReduceOp op, RngDtype dtype, uint64_t dst,
                      DeviceIndex src_device, uint64_t src, uint64_t count) override;
  absl::Status FinishAverage(BackendStream stream, RngDtype dtype, uint64_t data, uint64_t count,
                             int ranks) override;

  // Host memory needs no pinning: these only keep the books CUDA keeps, so
  // that misuse fails here as it would there.
  void AbandonInterprocessWaits() override {
    shutting_down_.store(true, std::memory_order_relaxed);
  }
  absl::Status PinHostMemory(void* data, uint64_t bytes) override;
  absl::Status UnpinHostMemory(void* data) override;
  bool memory_on_host() const override { return true; }
  // CommWork's copies and Reduce are the host's engine.
  CollectiveEngine* collectives() override { return nullptr; }
  absl::StatusOr<HostMemoryView> AccessOnHost(DeviceIndex device, uint64_t address,
                                              uint64_t bytes) override;
  absl::StatusOr<StreamHold> HoldStream(BackendStream stream,
                                        absl::AnyInvocable<void() &&> reached) override;

 private:
  struct Segment {
    uint64_t size = 0;
    std::shared_ptr<const SealedMemory> memory;  // null when !options_.backed
    std::string key;                             // in memory_files_
    // Mapped into this process on first use by queued work.
    std::shared_ptr<SegmentMapping> mapping;
  };

  struct Page {
    std::shared_ptr<const SealedMemory> memory;  // null when !options_.backed
    std::string key;                             // in memory_files_
    bool mapped = false;
    // Mapped into the range's mapping here, on first use by queued work.
    bool viewed = false;
  };
  struct Range {
    uint64_t size = 0;
    uint64_t page_size = 0;
    std::vector<Page> pages;  // by offset / page_size
    // The range reserved in this process: each page work has used mapped at
    // its offset (on first use), each unmapped one that was used turned into
    // scratch memory (queued work on memory freed under it writes there,
    // never faults); queued work holds it. Null when !options_.backed.
    std::shared_ptr<AddressReservation> mapping;
  };

  struct Device {
    DeviceInfo info;
    mutable absl::Mutex mu;
    uint64_t used ABSL_GUARDED_BY(mu) = 0;
    EmulatedAddressSpace addresses ABSL_GUARDED_BY(mu);
    // Live segments by address, ordered to find the one holding an address.
    std::map<uint64_t, Segment> segments ABSL_GUARDED_BY(mu);
    // Reserved ranges of expandable segments by address.
    std::map<uint64_t, Range> ranges ABSL_GUARDED_BY(mu);
    uint64_t next_serial ABSL_GUARDED_BY(mu) = 0;
  };

  // A host pointer to device memory, and the mapping that keeps it valid.
  struct HostView {
    std::shared_ptr<const void> mapping;
    uint8_t* data = nullptr;
  };

  explicit HostBackend(const Options& options);

  // INVALID_ARGUMENT unless 0 <= device < device_count().
  absl::Status CheckDevice(DeviceIndex device) const;
  // Host view of [address, address + bytes) on `device`. INVALID_ARGUMENT for
  // a bad device or a range not inside one live segment.
  absl::StatusOr<HostView> Translate(DeviceIndex device, uint64_t address, uint64_t bytes);
  // Translate's answer inside the mapped pages of an expandable segment's
  // range; nullopt when `address` is in no range.
  std::optional<absl::StatusOr<HostView>> TranslateInRangeLocked(Device& d, uint64_t address,
                                                                 uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(d.mu);
  // FindPages (page_ranges.h) in `d`'s ranges.
  using PageSpan = ::gpumux::PageSpan<Range>;
  static absl::StatusOr<PageSpan> FindPagesLocked(Device& d, uint64_t address, uint64_t size,
                                                  bool mapped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d.mu);
  absl::StatusOr<std::shared_ptr<HostStream>> FindStream(BackendStream stream);
  absl::StatusOr<std::shared_ptr<HostEvent>> FindEvent(BackendEvent event);
  // Queues `work` on `stream` (known as `handle`); NOT_FOUND when the stream
  // was destroyed meanwhile.
  static absl::Status Submit(HostStream& stream, BackendStream handle, HostStream::Work work);
  BackendEvent AddEvent(std::shared_ptr<HostEvent> event);
  // Removes retired streams that ran all their work; the caller releases
  // them outside the lock.
  std::vector<std::shared_ptr<HostStream>> TakeFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Options options_;
  std::unique_ptr<MemoryFileTable> own_memory_files_;  // when Options gave none
  MemoryFileTable* memory_files_;
  std::vector<std::unique_ptr<Device>> devices_;

  // Set by the destructor: queued waits on interprocess events give up.
  std::atomic<bool> shutting_down_{false};
  // Runs every stream's work; after shutting_down_, which it reads. The
  // destructor drains all streams, then destroys it.
  std::unique_ptr<HostStreamPool> stream_pool_;
  absl::Mutex mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<HostStream>> streams_ ABSL_GUARDED_BY(mu_);
  // Destroyed streams still running their queue (cudaStreamDestroy returns
  // at once); Synchronize waits for them, creation and destruction reap them.
  std::vector<std::shared_ptr<HostStream>> retired_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<HostEvent>> events_ ABSL_GUARDED_BY(mu_);
  // Interprocess events created here, by memory file key, until destroyed:
  // OpenIpcEventHandle finds them here (and refuses another device).
  struct OwnIpcEvent {
    BackendEvent event;
    DeviceIndex device;
    std::shared_ptr<HostIpcEvent> ipc;
    std::string handle;
  };
  absl::flat_hash_map<std::string, OwnIpcEvent> own_ipc_events_ ABSL_GUARDED_BY(mu_);
  // Pinned host ranges: start -> bytes.
  absl::flat_hash_map<void*, uint64_t> pinned_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
