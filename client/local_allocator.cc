#include "client/local_allocator.h"

#include <utility>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>
#include "absl/strings/str_cat.h"

#include "client/client_impl.h"
#include "client/cuda_free_fence.h"
#include "client/event.h"
#include "client/stream.h"
#include "common/device_range.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

// The daemon's latest refusal of a lease this thread asked for: the
// allocator obtains segments on the thread that allocates.
thread_local absl::Status lease_refusal;

}  // namespace

// The allocator's SegmentSource in the client: segments are leases of the
// daemon, mapped here once each; events are the daemon's, recorded on the
// session's streams by RPC (pooled by the allocator, so each is created
// once) or interprocess events this process recorded itself (free fences),
// queried locally.
class LocalAllocator::LeaseSource final : public SegmentSource {
 public:
  LeaseSource(Client::Impl& impl, int device_count, std::vector<uint64_t> total_memory)
      : impl_(impl), device_count_(device_count), total_memory_(std::move(total_memory)) {}

  int device_count() const override { return device_count_; }
  uint64_t TotalMemory(DeviceIndex device) const override {
    return total_memory_[static_cast<size_t>(device.value())];
  }

  absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const override {
    GPUMUX_ASSIGN_OR_RETURN(DeviceProperties properties, impl_.self_.GetDeviceProperties(device));
    return properties.free_memory;
  }

  absl::StatusOr<BackendSegment> ObtainSegment(DeviceIndex device, uint64_t size, StreamId stream,
                                               bool small_pool) override {
    v1::LeaseRequest request;
    request.set_device(device.value());
    request.set_size(size);
    request.set_stream(stream.value());
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
        // As Client::Allocate: frees apply all-or-nothing, so sending them
        // again settles whether they were; NOT_FOUND means they were.
        absl::Status resent = impl_.SendFrees(frees);
        if (!resent.ok() && !absl::IsNotFound(resent) && !absl::IsUnavailable(resent)) {
          spdlog::warn("gpumux: returning leases failed: {}", resent.ToString());
        }
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
    if (held.mapped) impl_.mapper_.Release(device, held.segment_id);
    // Leaves with the next request (a lease carries it), or the batcher's
    // timer: the caller may hold the allocator's device lock.
    impl_.EnqueueFree(held.id, device, /*cuda_device=*/-1);
    return absl::OkStatus();
  }

  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override {
    auto entry = std::make_unique<EventEntry>();
    entry->device = device;
    EventOptions options;
    options.blocking = flags.blocking;
    entry->daemon = Event(impl_.self_, options);
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
    return absl::OkStatus();  // the Event's destructor destroys the daemon's
  }

  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override {
    GPUMUX_ASSIGN_OR_RETURN(EventEntry * entry, Find(event));
    if (entry->fence != nullptr) {
      return absl::FailedPreconditionError("a free fence cannot be recorded again");
    }
    return entry->daemon.Record(Stream(impl_.self_, entry->device, StreamId(stream.value())));
  }

  absl::StatusOr<bool> QueryEvent(BackendEvent event) override {
    GPUMUX_ASSIGN_OR_RETURN(EventEntry * entry, Find(event));
    if (entry->fence != nullptr) return entry->fence();
    return entry->daemon.Query();
  }

  absl::Status SynchronizeEvent(BackendEvent event) override {
    GPUMUX_ASSIGN_OR_RETURN(EventEntry * entry, Find(event));
    if (entry->fence != nullptr) {
      while (!entry->fence()) std::this_thread::sleep_for(std::chrono::microseconds(20));
      return absl::OkStatus();
    }
    return entry->daemon.Synchronize();
  }

  // A query as an event the allocator waits on: of a free fence this
  // process recorded, or of an event a free waits for.
  BackendEvent AdoptFence(std::function<bool()> done) {
    auto entry = std::make_unique<EventEntry>();
    entry->fence = std::move(done);
    return AddEvent(std::move(entry));
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
    void* base = nullptr;
    bool mapped = false;
    int cuda_device = -1;
  };
  struct EventEntry {
    DeviceIndex device;
    Event daemon;                 // pooled: the daemon's event, recorded by RPC
    std::function<bool()> fence;  // or a query (AdoptFence)
  };

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
  const int device_count_;
  const std::vector<uint64_t> total_memory_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<DeviceIndex, uint64_t>, Lease> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<EventEntry>> events_ ABSL_GUARDED_BY(mu_);
};

LocalAllocator::LocalAllocator(Client::Impl& impl, int device_count,
                               std::vector<uint64_t> total_memory, const AllocatorOptions& options)
    : impl_(impl),
      client_(impl.session_id_),
      source_(std::make_unique<LeaseSource>(impl, device_count, std::move(total_memory))),
      allocator_(source_.get(), options) {}

// The allocator returns its segments (leases) as it goes; the daemon takes
// back whatever is left when the session ends.
LocalAllocator::~LocalAllocator() = default;

absl::StatusOr<LocalBlock> LocalAllocator::Allocate(DeviceIndex device, StreamId stream,
                                                    uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(device, source_->device_count()));
  lease_refusal = absl::OkStatus();
  absl::StatusOr<AllocationResult> allocated = allocator_.Allocate(device, client_, stream, size);
  if (!allocated.ok()) {
    if (absl::IsResourceExhausted(allocated.status()) && !lease_refusal.ok()) {
      return std::exchange(lease_refusal, absl::OkStatus());
    }
    return allocated.status();
  }
  return BlockOf(device, *allocated);
}

std::optional<LocalBlock> LocalAllocator::TryAllocateCached(DeviceIndex device, StreamId stream,
                                                            uint64_t size) {
  if (device.value() < 0 || device.value() >= source_->device_count()) return std::nullopt;
  std::optional<AllocationResult> allocated =
      allocator_.TryAllocateCached(device, client_, stream, size);
  if (!allocated.has_value()) return std::nullopt;
  absl::StatusOr<LocalBlock> block = BlockOf(device, *allocated);
  if (!block.ok()) return std::nullopt;  // Allocate reports a broken lease table
  return *std::move(block);
}

absl::StatusOr<LocalBlock> LocalAllocator::BlockOf(DeviceIndex device,
                                                   const AllocationResult& result) {
  LocalBlock block;
  block.segment_id = result.segment_id;
  block.address = result.address;
  block.offset = result.address - result.segment_address;
  block.size = result.size;
  block.requested_size = result.requested_size;
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

void LocalAllocator::Free(DeviceIndex device, uint64_t address, int cuda_device,
                          absl::Span<std::function<bool()>> completed) {
  std::function<bool()> fence = cuda_device < 0 ? nullptr : RecordLocalFreeFence(cuda_device);
  if (fence == nullptr && completed.empty()) {
    allocator_.Free(device, address);
    return;
  }
  std::vector<BackendEvent> wait_for;
  if (fence != nullptr) wait_for.push_back(source_->AdoptFence(std::move(fence)));
  for (std::function<bool()>& done : completed)
    wait_for.push_back(source_->AdoptFence(std::move(done)));
  allocator_.Free(device, address, wait_for);
}

bool LocalAllocator::TryFree(DeviceIndex device, uint64_t address, int cuda_device) {
  std::function<bool()> done = cuda_device < 0 ? nullptr : RecordLocalFreeFence(cuda_device);
  if (done == nullptr) return allocator_.TryFree(device, address);
  // A free that cannot go ahead now drops its fence; Free records its own.
  const BackendEvent fence = source_->AdoptFence(std::move(done));
  if (allocator_.TryFree(device, address, absl::MakeConstSpan(&fence, 1))) return true;
  source_->DestroyEvent(fence).IgnoreError();  // adopted here, never handed over
  return false;
}

void LocalAllocator::RecordStream(DeviceIndex device, uint64_t address, StreamId stream) {
  allocator_.RecordStream(device, address, stream, BackendStream(stream.value()));
}

void LocalAllocator::RecordDaemonWork(DeviceIndex device, uint64_t address, StreamId stream) {
  allocator_.RecordStream(device, address, stream, BackendStream(stream.value()),
                          /*even_allocation_stream=*/true);
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
