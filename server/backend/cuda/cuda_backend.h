#pragma once

// CudaBackend: DeviceBackend on the CUDA runtime, one object per daemon for
// every visible device.
//
// Segments are cudaMalloc allocations of whole 2 MiB pages (an importer maps
// the whole allocation), zeroed on the device before they are returned and
// exported with cudaIpcGetMemHandle (with Options::paged_segments, ranges of
// one page each, as expandable segments are made: cuda_backend_ranges.cc). ReleaseSegment takes a
// segment out of service at once (it can no longer be named by work), but
// cudaFree runs `release_grace` later on the backend's reaper thread: the
// daemon announces a release on the session stream right after the call
// returns, and CUDA requires importers to close their mapping
// (cudaIpcCloseMemHandle) before the exporter frees it. Memory pressure does
// not wait for the grace: an allocation that finds the device full frees
// every retiring segment of the device first, and FreeMemory counts them as
// free.
//
// Streams are cudaStreamNonBlocking streams with the device's priorities.
// Events are cudaEvents; interprocess ones export cudaIpcGetEventHandle, and
// opening a handle this process exported reuses its own event (CUDA cannot
// open an event in the process that created it). Host-to-device copies from
// pinned memory (PinHostMemory, i.e. cudaHostRegister) run at full speed;
// copies whose ranges overlap go through a temporary device buffer
// (cudaMemcpyAsync does not promise memmove semantics). keep_alive objects
// are released by the reaper thread after their copy ran (a host callback
// may not call CUDA, and releasing a staging buffer unpins it).
//
// Errors are translated in one place (common/cuda/cuda_status.h). A sticky error (an
// illegal address, a kernel fault) marks its device unhealthy: DeviceHealth
// reports it and every later call on the device fails with UNAVAILABLE
// without touching the lost context; the daemon keeps serving the other
// devices. Blocking waits (synchronize on streams, events and devices) poll
// with a short sleep once AbandonInterprocessWaits was called, so shutdown is
// never held up by another process's event; queued cudaStreamWaitEvents
// cannot be cancelled and die with the context at exit.
//
// Thread-safe. Each call selects its device on the calling thread
// (cudaSetDevice is thread-local and cheap).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/segments/page_ranges.h"
#include "server/backend/device_backend.h"
#include "server/backend/memory_file_table.h"

// cudaStream_t and cudaEvent_t, without including CUDA's headers here.
struct CUstream_st;
struct CUevent_st;

namespace gpumux {

class CudaBackend final : public DeviceBackend {
 public:
  struct Options {
    // How long cudaFree waits after ReleaseSegment (see above); zero frees
    // within the call.
    absl::Duration release_grace = absl::Milliseconds(200);
    // Load NCCL for the collectives (from `nccl_library`, else
    // libnccl.so.2 on the loader's path); without it, or where gpumuxd was
    // built without nccl.h, they use peer copies and the reduction kernel.
    bool nccl = true;
    std::string nccl_library;
    // Where the pages of expandable segments are filed for the memory
    // socket (the daemon's table); null: their pages cannot be shared
    // (PageHandles answers FAILED_PRECONDITION), as in a backend for tests.
    MemoryFileTable* memory_files = nullptr;
    // Segments too are made of pages (gpumuxd with expandable segments): a
    // segment (a shareable allocation's) is a range mapped whole with one
    // page, so it reaches other processes by descriptor, never by legacy
    // CUDA IPC. Needs SupportsExpandableSegments().
    bool paged_segments = false;
  };

  // Visible CUDA devices; 0 when there is no driver or no device.
  static int VisibleDeviceCount();

  // Initializes every visible device (context, an internal stream, device
  // code loaded). UNAVAILABLE when no device is visible or the driver is
  // missing or too old.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Options& options);
  // Waits for every device's work, then frees every segment and event still
  // held; after AbandonInterprocessWaits (shutdown) it neither waits nor
  // frees device memory: the process is exiting and the driver reclaims it.
  ~CudaBackend() override;

  absl::string_view name() const override { return "cuda"; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  const DeviceInfo& device_info(DeviceIndex device) const override;
  // cudaMemGetInfo's free plus the bytes of retiring segments.
  absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const override;
  absl::Status DeviceHealth(DeviceIndex device) const override;
  absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex device, uint64_t size) override;
  absl::Status ReleaseSegment(DeviceIndex device, uint64_t address) override;
  absl::Status Synchronize(DeviceIndex device) override;

  // cudaDeviceGetStreamPriorityRange (Hopper: least 0, greatest -5).
  StreamPriorityRange GetStreamPriorityRange(DeviceIndex device) const override;
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

  void AbandonInterprocessWaits() override {
    abandon_waits_.store(true, std::memory_order_relaxed);
  }
  // cudaHostRegister / cudaHostUnregister, with the books that give
  // ALREADY_EXISTS and NOT_FOUND.
  absl::Status PinHostMemory(void* data, uint64_t bytes) override;
  absl::Status UnpinHostMemory(void* data) override;
  bool memory_on_host() const override { return false; }
  // NCCL (cuda_backend_nccl.cc) where it was built in and loaded; else null.
  CollectiveEngine* collectives() override { return nccl_.get(); }
  // Why collectives() is null: OK when NCCL loaded.
  const absl::Status& nccl_status() const { return nccl_status_; }
  // collectives()'s description ("nccl 2.28.9"); empty without one.
  std::string collectives_description() const {
    return nccl_ != nullptr ? nccl_->description() : std::string();
  }
  absl::StatusOr<HostMemoryView> AccessOnHost(DeviceIndex device, uint64_t address,
                                              uint64_t bytes) override;
  absl::StatusOr<StreamHold> HoldStream(BackendStream stream,
                                        absl::AnyInvocable<void() &&> reached) override;

  // Expandable segments (cuda_backend_ranges.cc): where every device has
  // virtual memory management with POSIX descriptor export. A range is
  // cuMemAddressReserve'd; each page is its own cuMemCreate allocation,
  // mapped with read-write access for the device (and the devices whose
  // kernels read its memory), zeroed, and filed in memory_files for clients
  // to import. Unmapping takes the pages out of the books first (work naming
  // them is refused from then on), waits for the calls that checked their
  // ranges before to have queued their work (enqueue_mu_), then for the
  // streams of every device that can touch the pages (cuMemUnmap, unlike
  // cudaFree, does not wait for work on the memory, and a kernel touching an
  // unmapped page loses the context), and only then unmaps. A client's
  // mapping keeps a page's memory until it unmaps it in turn.
  bool SupportsExpandableSegments() const override { return vmm_.ok(); }
  // Why SupportsExpandableSegments() is false: OK when it is true.
  const absl::Status& expandable_segments_status() const { return vmm_; }
  absl::StatusOr<BackendRange> ReserveRange(DeviceIndex device, uint64_t size, uint64_t page_size,
                                            StreamId stream, bool small_pool) override;
  absl::Status MapPages(DeviceIndex device, uint64_t address, uint64_t size) override;
  absl::Status UnmapPages(DeviceIndex device, uint64_t address, uint64_t size) override;
  absl::Status ReleaseRange(DeviceIndex device, uint64_t address) override;
  absl::StatusOr<std::vector<PageHandle>> PageHandles(DeviceIndex device, uint64_t address,
                                                      uint64_t size) override;

 private:
  struct Segment {
    uint64_t size = 0;      // as asked for
    uint64_t reserved = 0;  // cudaMalloced: rounded up to 2 MiB
  };
  struct Retiring {
    uint64_t address = 0;
    uint64_t reserved = 0;
    absl::Time free_at;
  };

  // A page of an expandable segment: its cuMemCreate allocation, released
  // when the last holder (the range, a fetch in flight) lets go.
  class Page;
  struct MappedPage {
    std::shared_ptr<const Page> page;
    std::string key;  // in memory_files; empty without a table
  };
  struct Range {
    uint64_t size = 0;
    uint64_t page_size = 0;
    std::vector<MappedPage> pages;  // page i at offset i * page_size; unmapped: null
  };
  using PageSpan = ::gpumux::PageSpan<Range>;

  struct Device {
    DeviceInfo info;
    StreamPriorityRange priorities;
    // For zeroing new segments and warm-up; never handed out.
    CUstream_st* internal_stream = nullptr;
    mutable absl::Mutex mu;
    // Live segments by address, ordered to find the one holding an address.
    std::map<uint64_t, Segment> segments ABSL_GUARDED_BY(mu);
    // Expandable segments by address.
    std::map<uint64_t, Range> ranges ABSL_GUARDED_BY(mu);
    std::vector<Retiring> retiring ABSL_GUARDED_BY(mu);
    uint64_t retiring_bytes ABSL_GUARDED_BY(mu) = 0;
    // Not OK after a sticky error; never becomes OK again.
    absl::Status health ABSL_GUARDED_BY(mu);
    std::atomic<bool> unhealthy{false};
  };

  // Shared by the table and calls in flight: cudaStreamDestroy runs when the
  // last of them lets go, so a call racing with DestroyStream never uses a
  // destroyed stream.
  struct Stream {
    DeviceIndex device;
    std::shared_ptr<CUstream_st> handle;
    CUstream_st* get() const { return handle.get(); }
  };
  // A cudaEvent_t shared by every handle naming it (an interprocess event
  // this process exported and then opened by its handle).
  struct EventObject;
  struct Event {
    DeviceIndex device;
    EventFlags flags;
    std::shared_ptr<EventObject> object;
  };

  class Nccl;
  class NcclGroup;

  explicit CudaBackend(const Options& options);
  absl::Status Init();
  // NCCL's engine on the library at `path` (cuda_backend_nccl.cc).
  absl::StatusOr<std::unique_ptr<CollectiveEngine>> LoadNccl(const std::string& path);

  // INVALID_ARGUMENT unless 0 <= device < device_count().
  absl::Status CheckDevice(DeviceIndex device) const;
  // CheckDevice; the device's health status when it is unhealthy; otherwise
  // makes it current on this thread.
  absl::Status UseDevice(DeviceIndex device) const;
  // `error` as a status (CudaStatus); a sticky one also marks `device`
  // unhealthy.
  absl::Status Check(DeviceIndex device, int error, absl::string_view what) const;
  // INVALID_ARGUMENT unless [address, address + bytes) lies in one live
  // segment of `device`, or in mapped pages of one expandable segment.
  absl::Status CheckRange(DeviceIndex device, uint64_t address, uint64_t bytes) const;
  // FindPages (page_ranges.h) in `d`'s ranges.
  static absl::StatusOr<PageSpan> FindPagesLocked(Device& d, uint64_t address, uint64_t size,
                                                  bool mapped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d.mu);
  // Waits, after pages of `device` were taken out of their range, until
  // every call that checked its ranges before has queued its work and the
  // work of every device that can touch them ran.
  absl::Status AwaitWorkOn(DeviceIndex device);
  // Unmaps `pages` (address, page), taken out of their range and waited
  // for (AwaitWorkOn), and takes their keys out of memory_files.
  absl::Status UnmapTaken(DeviceIndex device,
                          const std::vector<std::pair<uint64_t, MappedPage>>& pages);
  // The devices whose kernels read `device`'s memory, `device` first.
  std::vector<int> Readers(DeviceIndex device) const;
  absl::StatusOr<Stream> FindStream(BackendStream stream) const;
  absl::StatusOr<Event> FindEvent(BackendEvent event) const;
  // `foreign`: an event another process exported, kept open (ipc_events_).
  BackendEvent AddEvent(Event event, bool foreign = false);
  // Polls `query` (cudaStreamQuery or cudaEventQuery, as an int) until it
  // is no longer cudaErrorNotReady: spinning for 100 us, then sleeping an
  // eighth of the time waited so far (at most 1 ms) per poll. Once
  // AbandonInterprocessWaits was called, a poll that finds the work pending
  // gives up with UNAVAILABLE.
  template <typename Query>
  absl::Status Wait(DeviceIndex device, absl::string_view what, Query query);
  // Releases `keep_alive` on the reaper thread once the work queued on
  // `stream` so far ran (an event the reaper polls: a host callback would
  // stall the stream between copies).
  absl::Status ReleaseAfter(const Stream& stream, std::shared_ptr<const void> keep_alive);

  // cudaFree of retiring segments of `device` due by `now` (all of them
  // with absl::InfiniteFuture()).
  void FreeRetiring(Device& device, absl::Time now);
  // Drops the keep-alives whose copies ran. The reaper polls; synchronize
  // calls also reap, so what they waited for is released when they return.
  void ReapKeepAlives();
  // Destroys the drain events of destroyed streams that completed.
  void PruneDrainingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunReaper();

  const Options options_;
  std::vector<std::unique_ptr<Device>> devices_;
  // [device][peer]: whether kernels on `device` read `peer`'s memory (set
  // by Init, read-only after).
  std::vector<std::vector<bool>> peer_readable_;
  std::atomic<bool> abandon_waits_{false};
  // Held shared by every call from the check of its ranges (CheckRange)
  // until its work is queued; UnmapTaken takes it exclusively, and at once
  // lets go, to wait for those in flight.
  mutable absl::Mutex enqueue_mu_;
  // OK where every device has virtual memory management with descriptor
  // export at 2 MiB granularity (set by Init).
  absl::Status vmm_;
  // Set by Create; destroyed first (its communicators use the devices).
  std::unique_ptr<CollectiveEngine> nccl_;
  absl::Status nccl_status_;

  mutable absl::Mutex mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Stream> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Event> events_ ABSL_GUARDED_BY(mu_);
  // Interprocess events created or opened here, by handle bytes. Events
  // other processes exported stay open (`kept`) after their last handle here
  // is destroyed: a client's free fence is one event it re-records for
  // every free, and cudaIpcOpenEventHandle costs tens of microseconds. At
  // most kMaxKeptIpcEvents stay open; the least recently used go first.
  struct IpcEvent {
    std::weak_ptr<EventObject> object;
    std::shared_ptr<EventObject> kept;  // only for events of other processes
    uint64_t last_use = 0;
  };
  static constexpr size_t kMaxKeptIpcEvents = 4096;
  absl::flat_hash_map<std::string, IpcEvent> ipc_events_ ABSL_GUARDED_BY(mu_);
  uint64_t ipc_event_uses_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<void*, uint64_t> pinned_ ABSL_GUARDED_BY(mu_);
  // An event recorded on each destroyed stream as it was destroyed, until it
  // completes: Synchronize(device) waits for those streams' work too.
  struct Draining {
    DeviceIndex device;
    std::shared_ptr<CUevent_st> done;  // cudaEventDestroy when the last holder lets go
  };
  std::vector<Draining> draining_ ABSL_GUARDED_BY(mu_);

  // The reaper: frees retiring segments when due and drops keep_alives whose
  // copies ran.
  struct KeepAlive {
    DeviceIndex device;
    CUevent_st* done = nullptr;
    std::shared_ptr<const void> object;
  };
  absl::Mutex reap_mu_ ABSL_ACQUIRED_BEFORE(reaper_mu_);
  absl::Mutex reaper_mu_;
  std::vector<KeepAlive> keep_alives_ ABSL_GUARDED_BY(reaper_mu_);
  bool reaper_wake_ ABSL_GUARDED_BY(reaper_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
};

}  // namespace gpumux
