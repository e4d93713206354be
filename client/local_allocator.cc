#include "client/local_allocator.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/base/device_range.h"
#include "common/base/status_macros.h"
#include "gpumux/event.h"
#include "gpumux/stream.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

// The daemon's latest refusal of a lease this thread asked for, and the
// daemon stream its next lease is for: the allocator obtains segments on
// the thread that allocates.
thread_local absl::Status lease_refusal;
thread_local StreamId lease_stream;

}  // namespace

// The allocator's SegmentSource in the client: segments are leases of the
// daemon, mapped here once each. The allocator's streams (the pool keys it
// records events on) are of two kinds, which BackendStream ids tell apart:
// the process's own (LocalStreams), where its kernels run, and the
// daemon's, where the daemon worked on a block. Its pooled events are
// recorded on either kind, so each is whichever the last record needed:
// a LocalStreams event, or the daemon's, recorded by RPC. Caller events
// (Free's `completed`) are queries adopted as events.
class LocalAllocator::LeaseSource final : public SegmentSource {
 public:
  LeaseSource(Client::Impl& impl, LocalStreams* streams, int device_count,
              std::vector<uint64_t> total_memory)
      : impl_(impl),
        streams_(streams),
        device_count_(device_count),
        total_memory_(std::move(total_memory)) {}

  ~LeaseSource() override {
    for (const auto& [id, entry] : events_) {
      if (entry->local.has_value()) streams_->DestroyEvent(*entry->local);
    }
  }

  int device_count() const override { return device_count_; }
  uint64_t TotalMemory(DeviceIndex device) const override {
    return total_memory_[static_cast<size_t>(device.value())];
  }

  absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const override {
    GPUMUX_ASSIGN_OR_RETURN(DeviceProperties properties, impl_.self_.GetDeviceProperties(device));
    return properties.free_memory;
  }

  // `stream`: the pool's, a LocalStream.
  absl::StatusOr<BackendSegment> ObtainSegment(DeviceIndex device, uint64_t size, StreamId stream,
                                               bool small_pool) override {
    if (streams_->Capturing(device, LocalStream(stream.value()))) {
      return CaptureError(device, size);
    }
    v1::LeaseRequest request;
    request.set_device(device.value());
    request.set_size(size);
    request.set_stream(lease_stream.value());
    request.set_small_pool(small_pool);
    // Leases returned since the last request leave with this one, so the
    // daemon has them back before it checks this one (the OOM retry).
    const FreeBatch frees = impl_.frees_.Take();
    for (AllocationId id : frees.ids) request.add_free_allocation_ids(id.value());
    if (!frees.wait_event_handles.empty()) {
      // Fenced frees of daemon-side allocations cannot ride on a lease.
      GPUMUX_RETURN_IF_ERROR(impl_.SendFrees(frees));
      request.clear_free_allocation_ids();
    }
    v1::AllocateResponse response;
    absl::Status status = impl_.CallWithSession([&](grpc::ClientContext* context) {
      return impl_.memory_stub_->Lease(context, request, &response);
    });
    if (!status.ok()) {
      if (absl::IsResourceExhausted(status)) lease_refusal = status;
      if (request.free_allocation_ids_size() > 0) {
        impl_.SettleCarriedFrees(frees, "returning leases");
      }
      return status;
    }
    const v1::Allocation& lease = response.allocation();
    if (lease.segment_size() != size || lease.offset() != 0) {
      impl_.EnqueueFree(AllocationId(lease.allocation_id()));
      return absl::InternalError(absl::StrCat("gpumuxd leased ", lease.segment_size(),
                                              " bytes at offset ", lease.offset(), " for ", size));
    }
    Lease held;
    held.id = AllocationId(lease.allocation_id());
    held.segment_id = SegmentId(lease.segment_id());
    held.stream = LocalStream(stream.value());
    absl::StatusOr<void*> base =
        impl_.mapper_.Map(device, held.segment_id, lease.segment_handle(), size,
                          impl_.memory_files_.get(), &held.cuda_device);
    if (base.ok()) {
      held.base = *base;
      held.mapped = true;
    } else if (!absl::IsUnimplemented(base.status())) {
      // Unimplemented: a CUDA handle this build cannot map; the memory is
      // still usable through the daemon. Anything else is a failure.
      impl_.EnqueueFree(held.id);
      return base.status();
    }
    {
      absl::MutexLock lock(&mu_);
      leases_[{device, lease.address()}] = held;
    }
    BackendSegment segment;
    segment.address = lease.address();
    segment.size = size;
    return segment;
  }

  absl::Status ReturnSegment(DeviceIndex device, uint64_t address) override {
    Lease held;
    {
      absl::MutexLock lock(&mu_);
      auto it = leases_.find({device, address});
      if (it == leases_.end()) {
        return absl::NotFoundError(
            absl::StrCat("no lease at address ", address, " on GPU ", device.value()));
      }
      held = it->second;
      leases_.erase(it);
    }
    // The daemon may zero the memory and lease it to another process at
    // once: the work queued on it here must be done first (as cudaFree
    // waits for the device). The work of other streams that used its
    // blocks was waited for before the blocks were free.
    if (absl::Status done = streams_->SynchronizeStream(device, held.stream); !done.ok()) {
      spdlog::warn("gpumux: returning a lease on GPU {} after its stream's work failed: {}",
                   device.value(), done.ToString());
    }
    if (held.mapped) impl_.mapper_.Release(device, held.segment_id);
    // Leaves with the next request (a lease carries it), or the batcher's
    // timer: the caller may hold the allocator's device lock.
    impl_.EnqueueFree(held.id, device, /*cuda_device=*/-1);
    return absl::OkStatus();
  }

  // FAILED_PRECONDITION: no memory can be leased while `device`'s stream
  // captures a graph.
  static absl::Status CaptureError(DeviceIndex device, uint64_t size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gpumux: an allocation during CUDA graph capture on GPU ", device.value(), " needs ", size,
        " bytes of new memory, and none can be leased while the stream captures: allocate (and "
        "free) the memory the graph needs before capture_begin, or let PyTorch's own "
        "allocator hold the graph's memory (torch.cuda.MemPool over gpumux, "
        "gpumux.torch.mem_pool())"));
  }

  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override {
    auto entry = std::make_unique<EventEntry>();
    entry->device = device;
    entry->blocking = flags.blocking;
    return AddEvent(std::move(entry));
  }

  absl::Status DestroyEvent(BackendEvent event) override {
    std::unique_ptr<EventEntry> doomed;
    {
      absl::MutexLock lock(&mu_);
      auto it = events_.find(event.value());
      if (it == events_.end()) return UnknownEvent(event);
      doomed = std::move(it->second);
      events_.erase(it);
    }
    if (doomed->local.has_value()) streams_->DestroyEvent(*doomed->local);
    return absl::OkStatus();  // the Event's destructor destroys the daemon's
  }

  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override {
    GPUMUX_ASSIGN_OR_RETURN(EventEntry * entry, Find(event));
    GPUMUX_ASSIGN_OR_RETURN(const StreamRef ref, FindStream(stream));
    if (entry->query != nullptr) {
      return absl::FailedPreconditionError("a caller's event cannot be recorded");
    }
    if (ref.device != entry->device) {
      return absl::InvalidArgumentError(absl::StrCat("an event of GPU ", entry->device.value(),
                                                     " cannot be recorded on GPU ",
                                                     ref.device.value()));
    }
    if (ref.local) {
      if (!entry->local.has_value()) {
        GPUMUX_ASSIGN_OR_RETURN(entry->local, streams_->CreateEvent(entry->device));
      }
      GPUMUX_RETURN_IF_ERROR(
          streams_->RecordEvent(*entry->local, entry->device, LocalStream(ref.id)));
    } else {
      if (!entry->daemon.has_value()) {
        EventOptions options;
        options.blocking = entry->blocking;
        entry->daemon.emplace(impl_.self_, options);
      }
      GPUMUX_RETURN_IF_ERROR(
          entry->daemon->Record(Stream(impl_.self_, entry->device, StreamId(ref.id))));
    }
    entry->recorded_locally = ref.local;
    entry->recorded = true;
    return absl::OkStatus();
  }

  absl::StatusOr<bool> QueryEvent(BackendEvent event) override {
    GPUMUX_ASSIGN_OR_RETURN(EventEntry * entry, Find(event));
    if (entry->query != nullptr) return entry->query();
    if (!entry->recorded) return true;
    if (entry->recorded_locally) return streams_->QueryEvent(*entry->local);
    return entry->daemon->Query();
  }

  absl::Status SynchronizeEvent(BackendEvent event) override {
    GPUMUX_ASSIGN_OR_RETURN(EventEntry * entry, Find(event));
    if (entry->query != nullptr) {
      while (!entry->query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
      return absl::OkStatus();
    }
    if (!entry->recorded) return absl::OkStatus();
    if (entry->recorded_locally) return streams_->SynchronizeEvent(*entry->local);
    return entry->daemon->Synchronize();
  }

  // A query as an event the allocator waits on (an event a free waits for).
  BackendEvent AdoptQuery(std::function<bool()> done) {
    auto entry = std::make_unique<EventEntry>();
    entry->query = std::move(done);
    return AddEvent(std::move(entry));
  }

  // The allocator's name for this process's `stream` on `device`, and for
  // the daemon's stream `stream` (both made on first use).
  BackendStream LocalBackendStream(DeviceIndex device, LocalStream stream) {
    return BackendStreamOf(StreamRef{.local = true, .device = device, .id = stream.value()});
  }
  BackendStream DaemonBackendStream(DeviceIndex device, StreamId stream) {
    return BackendStreamOf(StreamRef{.local = false, .device = device, .id = stream.value()});
  }

  // The lease at `segment_address` on `device`.
  bool FindLease(DeviceIndex device, uint64_t segment_address, AllocationId* id, void** base,
                 int* cuda_device) const {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find({device, segment_address});
    if (it == leases_.end()) return false;
    *id = it->second.id;
    *base = it->second.base;
    *cuda_device = it->second.cuda_device;
    return true;
  }

  size_t lease_count() const {
    absl::MutexLock lock(&mu_);
    return leases_.size();
  }

 private:
  struct Lease {
    AllocationId id;
    SegmentId segment_id;
    LocalStream stream;  // its pool's, whose work must end before it goes back
    void* base = nullptr;
    bool mapped = false;
    int cuda_device = -1;
  };
  // A pooled event, made on its first record for the kind of stream it is
  // recorded on, or a caller's query (AdoptQuery).
  struct EventEntry {
    DeviceIndex device;
    bool blocking = false;
    std::optional<LocalEventId> local;
    std::optional<Event> daemon;  // recorded by RPC
    bool recorded = false;
    bool recorded_locally = false;  // the last record was on a LocalStream
    std::function<bool()> query;
  };
  struct StreamRef {
    bool local = false;  // a LocalStream, or the daemon's StreamId
    DeviceIndex device;
    uint64_t id = 0;
    template <typename H>
    friend H AbslHashValue(H h, const StreamRef& s) {
      return H::combine(std::move(h), s.local, s.device, s.id);
    }
    friend bool operator==(const StreamRef&, const StreamRef&) = default;
  };

  BackendStream BackendStreamOf(const StreamRef& ref) {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = stream_ids_.try_emplace(ref, 0);
    if (inserted) {
      it->second = next_stream_++;
      streams_by_id_[it->second] = ref;
    }
    return BackendStream(it->second);
  }
  absl::StatusOr<StreamRef> FindStream(BackendStream stream) const {
    absl::MutexLock lock(&mu_);
    auto it = streams_by_id_.find(stream.value());
    if (it == streams_by_id_.end()) {
      return absl::NotFoundError(absl::StrCat("stream ", stream.value(), " not found"));
    }
    return it->second;
  }

  static absl::Status UnknownEvent(BackendEvent event) {
    return absl::NotFoundError(absl::StrCat("event ", event.value(), " not found"));
  }
  BackendEvent AddEvent(std::unique_ptr<EventEntry> entry) {
    absl::MutexLock lock(&mu_);
    const uint64_t id = next_event_++;
    events_.emplace(id, std::move(entry));
    return BackendEvent(id);
  }
  // Entries live until DestroyEvent, which the allocator calls only once it
  // is done with the event.
  absl::StatusOr<EventEntry*> Find(BackendEvent event) {
    absl::MutexLock lock(&mu_);
    auto it = events_.find(event.value());
    if (it == events_.end()) return UnknownEvent(event);
    return it->second.get();
  }

  Client::Impl& impl_;
  LocalStreams* const streams_;
  const int device_count_;
  const std::vector<uint64_t> total_memory_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<DeviceIndex, uint64_t>, Lease> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<EventEntry>> events_ ABSL_GUARDED_BY(mu_);
  uint64_t next_stream_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<StreamRef, uint64_t> stream_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, StreamRef> streams_by_id_ ABSL_GUARDED_BY(mu_);
};

LocalAllocator::LocalAllocator(Client::Impl& impl, LocalStreams* streams, int device_count,
                               std::vector<uint64_t> total_memory, const AllocatorOptions& options)
    : impl_(impl),
      streams_(streams),
      client_(impl.session_id_),
      source_(std::make_unique<LeaseSource>(impl, streams, device_count, std::move(total_memory))),
      allocator_(source_.get(), options) {}

// The allocator returns its segments (leases) as it goes, each after its
// stream's work (LeaseSource::ReturnSegment); the daemon takes back
// whatever is left when the session ends.
LocalAllocator::~LocalAllocator() = default;

absl::StatusOr<LocalBlock> LocalAllocator::Allocate(DeviceIndex device, LocalStream stream,
                                                    StreamId lease_stream_id, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(device, source_->device_count()));
  const StreamId pool(stream.value());
  // A cached block with no event to query and no lease to take is legal
  // during a capture too: only the other paths ask whether one runs.
  if (deferred_count_.load(std::memory_order_acquire) == 0) {
    if (std::optional<AllocationResult> cached =
            allocator_.TryAllocateCached(device, client_, pool, size)) {
      return BlockOf(device, stream, *cached);
    }
  }
  if (streams_->Capturing(device, stream)) {
    // No event query and no lease: PyTorch skips process_events during a
    // capture, where cudaEventQuery is illegal.
    absl::StatusOr<AllocationResult> cached =
        allocator_.AllocateDuringCapture(device, client_, pool, size);
    if (absl::IsFailedPrecondition(cached.status())) {
      return LeaseSource::CaptureError(device, RoundSize(size, allocator_.options()));
    }
    GPUMUX_RETURN_IF_ERROR(cached.status());
    return BlockOf(device, stream, *cached);
  }
  FreeDeferred(device);
  lease_refusal = absl::OkStatus();
  lease_stream = lease_stream_id;
  absl::StatusOr<AllocationResult> allocated = allocator_.Allocate(device, client_, pool, size);
  if (!allocated.ok()) {
    if (absl::IsResourceExhausted(allocated.status()) && !lease_refusal.ok()) {
      return std::exchange(lease_refusal, absl::OkStatus());
    }
    return allocated.status();
  }
  return BlockOf(device, stream, *allocated);
}

std::optional<LocalBlock> LocalAllocator::TryAllocateCached(DeviceIndex device, LocalStream stream,
                                                            uint64_t size) {
  if (device.value() < 0 || device.value() >= source_->device_count()) return std::nullopt;
  std::optional<AllocationResult> allocated =
      allocator_.TryAllocateCached(device, client_, StreamId(stream.value()), size);
  if (!allocated.has_value()) return std::nullopt;
  absl::StatusOr<LocalBlock> block = BlockOf(device, stream, *allocated);
  if (!block.ok()) return std::nullopt;  // Allocate reports a broken lease table
  return *std::move(block);
}

absl::StatusOr<LocalBlock> LocalAllocator::BlockOf(DeviceIndex device, LocalStream stream,
                                                   const AllocationResult& result) {
  LocalBlock block;
  block.segment_id = result.segment_id;
  block.address = result.address;
  block.offset = result.address - result.segment_address;
  block.size = result.size;
  block.requested_size = result.requested_size;
  block.stream = stream;
  void* base = nullptr;
  if (!source_->FindLease(device, result.segment_address, &block.lease, &base,
                          &block.cuda_device)) {
    allocator_.Free(device, result.address);
    return absl::InternalError(absl::StrCat("the local allocator placed a block at ",
                                            result.address, " outside every lease"));
  }
  if (base != nullptr) block.data = static_cast<char*>(base) + block.offset;
  return block;
}

void LocalAllocator::Free(DeviceIndex device, uint64_t address, LocalStream stream,
                          absl::Span<std::function<bool()>> completed) {
  std::vector<LocalStream> used;
  if (used_count_.load(std::memory_order_acquire) > 0) {
    absl::MutexLock lock(&used_mu_);
    if (auto it = used_.find(Used{device, address}); it != used_.end()) {
      used = std::move(it->second);
      used_.erase(it);
      used_count_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (!used.empty()) {
    // Its free records an event on each stream that used it, which a
    // capture forbids (PyTorch's needs_events_deferred_until_no_capture).
    used.push_back(stream);
    for (LocalStream s : used) {
      if (!streams_->Capturing(device, s)) continue;
      absl::MutexLock lock(&used_mu_);
      deferred_[device].push_back(address);
      deferred_count_.fetch_add(1, std::memory_order_release);
      return;
    }
  }
  if (completed.empty()) {
    allocator_.Free(device, address);
    return;
  }
  std::vector<BackendEvent> wait_for;
  for (std::function<bool()>& done : completed)
    wait_for.push_back(source_->AdoptQuery(std::move(done)));
  allocator_.Free(device, address, wait_for);
}

void LocalAllocator::FreeDeferred(DeviceIndex device) {
  if (deferred_count_.load(std::memory_order_acquire) == 0) return;
  std::vector<uint64_t> addresses;
  {
    absl::MutexLock lock(&used_mu_);
    auto it = deferred_.find(device);
    if (it == deferred_.end()) return;
    addresses = std::move(it->second);
    deferred_.erase(it);
    deferred_count_.fetch_sub(addresses.size(), std::memory_order_relaxed);
  }
  allocator_.FreeBatch(device, addresses);
}

bool LocalAllocator::TryFree(DeviceIndex device, uint64_t address) {
  if (used_count_.load(std::memory_order_acquire) > 0) {
    absl::MutexLock lock(&used_mu_);
    if (used_.contains(Used{device, address})) return false;  // Free records its events
  }
  return allocator_.TryFree(device, address);
}

void LocalAllocator::RecordStream(DeviceIndex device, uint64_t address,
                                  LocalStream allocation_stream, LocalStream stream) {
  if (stream == allocation_stream) return;  // its own stream orders its reuse
  {
    absl::MutexLock lock(&used_mu_);
    auto [it, inserted] = used_.try_emplace(Used{device, address});
    if (inserted) used_count_.fetch_add(1, std::memory_order_release);
    std::vector<LocalStream>& used = it->second;
    if (std::find(used.begin(), used.end(), stream) != used.end()) return;
    used.push_back(stream);
  }
  allocator_.RecordStream(device, address, StreamId(stream.value()),
                          source_->LocalBackendStream(device, stream));
}

void LocalAllocator::RecordDaemonWork(DeviceIndex device, uint64_t address, StreamId stream,
                                      bool even_allocation_stream) {
  allocator_.RecordStream(device, address, stream, source_->DaemonBackendStream(device, stream),
                          even_allocation_stream);
}

EmptyCacheResult LocalAllocator::EmptyCache(std::optional<DeviceIndex> device) {
  return allocator_.EmptyCache(device, std::nullopt);
}

void LocalAllocator::SetMemoryLimit(DeviceIndex device, uint64_t bytes) {
  allocator_.SetMemoryLimit(device, client_, bytes);
}

DeviceStats LocalAllocator::Stats(DeviceIndex device) const { return allocator_.GetStats(device); }
void LocalAllocator::ResetPeakStats(DeviceIndex device) {
  allocator_.ResetPeakStats(device, std::nullopt);
}
void LocalAllocator::ResetAccumulatedStats(DeviceIndex device) {
  allocator_.ResetAccumulatedStats(device, std::nullopt);
}

std::vector<SegmentSnapshot> LocalAllocator::Snapshot(std::optional<DeviceIndex> device) const {
  return allocator_.Snapshot(device, std::nullopt);
}

size_t LocalAllocator::lease_count() const { return source_->lease_count(); }

void LocalAllocator::AttachStatsPage(SealedMemory memory, MemoryMapping mapping,
                                     StatsPageWriter writer) {
  stats_memory_.emplace(std::move(memory));
  mapping_ = std::move(mapping);
  stats_page_.emplace(writer);
  allocator_.SetStatsPublisher([this](DeviceIndex device, const DeviceStats& stats) {
    stats_page_->Publish(device.value(), stats);
  });
}

}  // namespace gpumux
