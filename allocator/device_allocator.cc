#include "allocator/device_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "allocator/oom_message.h"
#include "allocator/stat_updates.h"
#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

// DeviceCachingAllocator::malloc and free: the hot path and the segments it
// obtains and returns.

namespace gpumux {

DeviceAllocator::DeviceAllocator(DeviceIndex device, SegmentSource* backend,
                                 const AllocatorOptions& options,
                                 std::atomic<uint64_t>* next_segment_id)
    : device_(device),
      backend_(backend),
      options_(options),
      next_segment_id_(next_segment_id),
      events_(device, backend) {
  stats_.max_split_size = static_cast<int64_t>(options_.max_split_size);
}

DeviceAllocator::~DeviceAllocator() {
  absl::MutexLock lock(&mu_);
  for (const auto& [address, segment] : segments_) {
    absl::Status status = segment->expandable ? backend_->ReleaseRange(device_, address)
                                              : backend_->ReturnSegment(device_, address);
    if (!status.ok())
      spdlog::warn("allocator: releasing segment {:#x}: {}", address, status.ToString());
  }
}

ClientState* DeviceAllocator::ClientLocked(ClientId client) {
  if (last_client_ != nullptr && last_client_->id == client) return last_client_;
  std::unique_ptr<ClientState>& slot = clients_[client];
  if (slot == nullptr) {
    slot = std::make_unique<ClientState>();
    slot->id = client;
    slot->stats.max_split_size = stats_.max_split_size;
  }
  slot->removed = false;
  last_client_ = slot.get();
  return last_client_;
}

const ClientState* DeviceAllocator::FindClientLocked(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? nullptr : it->second.get();
}

Block* DeviceAllocator::AllocatedBlockOrDie(uint64_t address) const {
  auto it = allocated_.find(address);
  if (it == allocated_.end()) {
    spdlog::critical("allocator: GPU {} has no live block at {:#x}", device_.value(), address);
    std::abort();
  }
  return it->second;
}

absl::StatusOr<AllocationResult> DeviceAllocator::Allocate(ClientId client, StreamId stream,
                                                           uint64_t size, bool dedicated,
                                                           bool count_oom,
                                                           ReleasedSegments* released) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  // Before any client lookup: freeing pending blocks may forget removed clients.
  if (!events_.empty()) ProcessEventsLocked(released);
  Request r;
  r.client = ClientLocked(client);
  r.stream = stream;
  r.size = RoundSize(size, options_);
  r.is_small = r.size <= kSmallSize;
  r.dedicated = dedicated;
  r.count_oom = count_oom;
  r.released = released;
  StreamPools& pools = r.client->PoolsFor(stream);
  r.pool = r.is_small ? &pools.small : &pools.large;
  if (!dedicated) r.block = GetFreeBlockLocked(r);
  if (r.block == nullptr) {
    // Only needed from here on (PyTorch computes it up front; it is pure).
    r.alloc_size =
        dedicated ? (r.size + kRoundLarge - 1) / kRoundLarge * kRoundLarge : SegmentSizeFor(r.size);
    GPUMUX_RETURN_IF_ERROR(NewSegmentWithRetriesLocked(r, released));
    if (r.block == nullptr) return OutOfMemoryLocked(r);
  }
  return AllocFoundBlockLocked(r, size);
}

absl::StatusOr<AllocationResult> DeviceAllocator::Lease(ClientId client, StreamId stream,
                                                        uint64_t size, bool small_pool,
                                                        bool count_oom,
                                                        ReleasedSegments* released) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  if (!events_.empty()) ProcessEventsLocked(released);
  Request r;
  r.client = ClientLocked(client);
  r.stream = stream;
  r.size = r.alloc_size = size;
  r.is_small = small_pool;
  r.dedicated = r.leased = true;
  r.count_oom = count_oom;
  r.released = released;
  StreamPools& pools = r.client->PoolsFor(stream);
  r.pool = small_pool ? &pools.small : &pools.large;
  GPUMUX_RETURN_IF_ERROR(NewSegmentWithRetriesLocked(r, released));
  if (r.block == nullptr) return OutOfMemoryLocked(r);
  return AllocFoundBlockLocked(r, size);
}

std::optional<AllocationResult> DeviceAllocator::TryAllocateCached(ClientId client, StreamId stream,
                                                                   uint64_t size) {
  if (!mu_.TryLock()) return std::nullopt;
  std::optional<AllocationResult> result = TryAllocateCachedLocked(client, stream, size);
  mu_.Unlock();
  return result;
}

absl::StatusOr<AllocationResult> DeviceAllocator::AllocateDuringCapture(ClientId client,
                                                                        StreamId stream,
                                                                        uint64_t size) {
  absl::MutexLock lock(&mu_);
  Request r;
  r.client = ClientLocked(client);
  if (FindCachedBlockLocked(r, stream, size) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no cached block of ", r.size, " bytes for stream ", stream.value(),
                     " on GPU ", device_.value(), ", and none can be made during a capture"));
  }
  PublishOnExit publish(this);
  return AllocFoundBlockLocked(r, size);
}

// Allocate's path through a cached block, where it ends without a backend
// call; any other path is left to Allocate.
std::optional<AllocationResult> DeviceAllocator::TryAllocateCachedLocked(ClientId client,
                                                                         StreamId stream,
                                                                         uint64_t size) {
  // Retiring pending frees queries their events, and garbage collection may
  // return segments: both call the backend.
  if (!events_.empty()) return std::nullopt;
  Request r;
  r.client = ClientLocked(client);
  if (GcEnabledFor(r.client)) return std::nullopt;
  if (FindCachedBlockLocked(r, stream, size) == nullptr) return std::nullopt;
  PublishOnExit publish(this);
  return AllocFoundBlockLocked(r, size);
}

Block* DeviceAllocator::FindCachedBlockLocked(Request& r, StreamId stream, uint64_t size) {
  r.stream = stream;
  r.size = RoundSize(size, options_);
  r.is_small = r.size <= kSmallSize;
  StreamPools& pools = r.client->PoolsFor(stream);
  r.pool = r.is_small ? &pools.small : &pools.large;
  r.block = GetFreeBlockLocked(r);
  return r.block;
}

Block* DeviceAllocator::GetFreeBlockLocked(Request& r) {
  BlockPool& pool = *r.pool;
  if (GcEnabledFor(r.client)) ++r.client->free_block_calls[r.is_small ? 0 : 1];
  BlockPool::Iterator it = pool.LowerBound(r.size);
  if (it == pool.end()) return nullptr;
  if (options_.expandable_segments && it->block->segment->expandable) {
    // For best fit, a free block before unmapped pages counts as big as it
    // can grow: a block that fits without growing is taken first.
    auto expandable_size = [](const Block* b) {
      return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
    };
    for (auto next = std::next(it); it->block->segment->expandable && next != pool.end() &&
                                    expandable_size(next->block) < expandable_size(it->block);
         ++next) {
      it = next;
    }
  }
  // Small requests never take an oversize block; oversize requests take one
  // at most max_non_split_rounding_size bigger.
  if (r.size < options_.max_split_size && it->size >= options_.max_split_size) return nullptr;
  if (r.size >= options_.max_split_size &&
      it->size >= r.size + options_.max_non_split_rounding_size) {
    return nullptr;
  }
  Block* block = it->block;
  pool.Erase(it);
  return block;
}

absl::Status DeviceAllocator::NewSegmentWithRetriesLocked(Request& r, ReleasedSegments* released) {
  if (GcEnabledFor(r.client)) GarbageCollectLocked(r.client, released);
  GPUMUX_RETURN_IF_ERROR(AllocBlockLocked(r, /*is_retry=*/false));
  if (r.block == nullptr && ReleaseAvailableCachedBlocksLocked(r, released)) {
    GPUMUX_RETURN_IF_ERROR(AllocBlockLocked(r, /*is_retry=*/false));
  }
  // Each obstacle releases what can help with it, widening while a retry
  // meets a wider one: over its own limit the client's cache, over its
  // tenant's the caches of every client of the tenant (the same tenant, so
  // nothing is lent across tenants), and a full device every client's cached
  // segments (released, never lent to another client).
  Shortage released_for = Shortage::kNone;
  while (r.block == nullptr && r.shortage > released_for) {
    released_for = r.shortage;
    switch (released_for) {
      case Shortage::kClientLimit:
        ReleaseCachedBlocksLocked(r.client, r.client, released);
        break;
      case Shortage::kTenantLimit:
        ReleaseTenantCacheLocked(r.client->tenant, r.client, released);
        break;
      case Shortage::kNone:  // not reached: a shortage is above kNone
      case Shortage::kDevice:
        ReleaseCachedBlocksLocked(nullptr, r.client, released);
        break;
    }
    GPUMUX_RETURN_IF_ERROR(AllocBlockLocked(r, /*is_retry=*/true));
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::AllocBlockLocked(Request& r, bool is_retry) {
  ClientState* client = r.client;
  if (is_retry) Charge(client, [](DeviceStats& s) { ++s.num_alloc_retries; });
  if (options_.expandable_segments && !r.dedicated) {
    r.shortage = Shortage::kNone;
    return AllocExpandableLocked(r);
  }
  r.shortage = LimitShortageLocked(r, r.alloc_size);
  if (r.shortage != Shortage::kNone) return absl::OkStatus();
  TenantState* tenant = client->tenant;
  absl::StatusOr<BackendSegment> got =
      backend_->ObtainSegment(device_, r.alloc_size, r.stream, r.is_small);
  if (!got.ok()) {
    if (got.status().code() != absl::StatusCode::kResourceExhausted) return got.status();
    r.shortage = Shortage::kDevice;
    return absl::OkStatus();
  }
  auto segment = std::make_unique<Segment>();
  segment->id = SegmentId(next_segment_id_->fetch_add(1, std::memory_order_relaxed));
  segment->address = got->address;
  segment->size = r.alloc_size;
  segment->handle = std::make_shared<const SegmentHandle>(std::move(got->handle));
  segment->stream = r.stream;
  segment->owner = client;
  segment->is_small = r.is_small;
  segment->dedicated = r.dedicated;
  segment->leased = r.leased;

  Block* block = arena_.New();
  block->address = segment->address;
  block->size = r.alloc_size;
  block->stream = r.stream;
  block->owner = block->charged = client;
  block->pool = r.dedicated ? nullptr : r.pool;
  block->segment = segment.get();
  block->is_small = r.is_small;
  segment->head = block;
  segments_.emplace(segment->address, std::move(segment));

  const int pool = PoolStat(r.is_small);
  const bool oversize = r.alloc_size >= options_.max_split_size;
  Charge(client, [&](DeviceStats& s) {
    Increase(s.segment, pool, 1);
    Increase(s.reserved_bytes, pool, Bytes(r.alloc_size));
    if (oversize) s.oversize_segments.Increase(1);
    ++s.num_device_alloc;
  });
  if (tenant != nullptr) tenant->reserved += r.alloc_size;
  r.block = block;
  return absl::OkStatus();
}

bool DeviceAllocator::ShouldSplit(const Block* block, uint64_t size) const {
  const uint64_t remaining = block->size - size;
  if (block->is_small || options_.expandable_segments) return remaining >= kMinBlockSize;
  return size < options_.max_split_size && remaining > kSmallSize;
}

AllocationResult DeviceAllocator::AllocFoundBlockLocked(Request& r, uint64_t orig_size) {
  Block* block = r.block;
  ClientState* client = block->owner;
  const int pool = PoolStat(r.is_small);
  const bool already_split = block->is_split();
  // inactive_split leaves out expandable segments, whose free pages can
  // always be unmapped (as PyTorch counts it).
  const bool counts_split = !block->segment->expandable;
  if (!r.dedicated && ShouldSplit(block, r.size)) {
    // The new block takes the front; the remainder goes back to the pool.
    Block* remaining = block;
    block = arena_.New();
    *block = *remaining;
    block->size = r.size;
    block->next = remaining;
    if (block->prev != nullptr) {
      block->prev->next = block;
    } else {
      block->segment->head = block;
    }
    remaining->prev = block;
    remaining->address += r.size;
    remaining->size -= r.size;
    CacheBlockLocked(remaining);
    if (counts_split && already_split) {
      Charge(client,
             [&](DeviceStats& s) { Decrease(s.inactive_split_bytes, pool, Bytes(r.size)); });
    } else if (counts_split) {
      Charge(client, [&](DeviceStats& s) {
        Increase(s.inactive_split_bytes, pool, Bytes(remaining->size));
        Increase(s.inactive_split, pool, 1);
      });
    }
  } else if (already_split && counts_split) {
    Charge(client, [&](DeviceStats& s) {
      Decrease(s.inactive_split_bytes, pool, Bytes(block->size));
      Decrease(s.inactive_split, pool, 1);
    });
  }
  block->allocated = true;
  block->requested_size = orig_size;
  block->charged = client;
  allocated_.emplace(block->address, block);
  const bool oversize = block->size >= options_.max_split_size;
  // A lease's block is the client's to carve: its allocations count there.
  if (!r.leased)
    Charge(client, [&](DeviceStats& s) {
      Increase(s.allocation, pool, 1);
      Increase(s.allocated_bytes, pool, Bytes(block->size));
      Increase(s.active, pool, 1);
      Increase(s.active_bytes, pool, Bytes(block->size));
      Increase(s.requested_bytes, pool, Bytes(orig_size));
      if (oversize) s.oversize_allocations.Increase(1);
    });

  AllocationResult result;
  result.address = block->address;
  result.size = block->size;
  result.requested_size = orig_size;
  const Segment& segment = *block->segment;
  result.segment_id = segment.id;
  result.segment_address = segment.address;
  result.segment_size = segment.size;
  result.segment_handle = segment.handle;
  return result;
}

void DeviceAllocator::CountOom(ClientId client) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  Charge(ClientLocked(client), [](DeviceStats& s) { ++s.num_ooms; });
}

absl::Status DeviceAllocator::OutOfMemoryLocked(const Request& r) {
  if (r.count_oom) Charge(r.client, [](DeviceStats& s) { ++s.num_ooms; });
  OomReport report;
  report.device = device_.value();
  report.attempted_segment_size = r.alloc_size;
  report.device_total = backend_->TotalMemory(device_);
  report.device_free = backend_->FreeMemory(device_);
  report.device_allocated = static_cast<uint64_t>(stats_.allocated_bytes[kAggregate].current);
  report.device_reserved = static_cast<uint64_t>(stats_.reserved_bytes[kAggregate].current);
  report.client_allocated =
      static_cast<uint64_t>(r.client->stats.allocated_bytes[kAggregate].current);
  report.client_reserved = r.client->reserved();
  report.client_limit = r.client->limit;
  if (const TenantState* tenant = r.client->tenant; tenant != nullptr && tenant->limit > 0) {
    report.tenant = tenant->name;
    report.tenant_limit = tenant->limit;
    report.tenant_reserved = tenant->reserved;
    for (const ClientState* client : tenant->clients) report.tenant_clients += !client->removed;
  }
  absl::Status status = absl::ResourceExhaustedError(FormatOomMessage(report));
  SetShortage(r.shortage, status);
  return status;
}

void DeviceAllocator::Free(absl::Span<const uint64_t> addresses,
                           absl::Span<const BackendEvent> wait_for, ReleasedSegments* released) {
  // A long request takes the lock in slices, so other clients' calls on the
  // device interleave with it; the request's hold keeps its caller events
  // alive between slices.
  constexpr size_t kSlice = 1024;
  for (size_t start = 0;; start += kSlice) {
    absl::MutexLock lock(&mu_);
    PublishOnExit publish(this);
    if (start == 0) events_.BeginCallerEvents(wait_for);
    for (uint64_t address : addresses.subspan(std::min(start, addresses.size()), kSlice))
      FreeOneLocked(address, wait_for, released);
    if (start + kSlice >= addresses.size()) {
      events_.EndCallerEvents(wait_for);
      return;
    }
  }
}

bool DeviceAllocator::TryFree(uint64_t address, absl::Span<const BackendEvent> wait_for) {
  if (!mu_.TryLock()) return false;
  const bool freed = TryFreeLocked(address, wait_for);
  mu_.Unlock();
  return freed;
}

// Free's path where it ends without a backend call: no event to record on
// another stream, no segment to return.
bool DeviceAllocator::TryFreeLocked(uint64_t address, absl::Span<const BackendEvent> wait_for) {
  auto it = allocated_.find(address);
  if (it == allocated_.end()) return false;  // Free reports it
  const Block* block = it->second;
  if (!block->stream_uses.empty() || block->segment->dedicated || block->owner->removed ||
      block->charged->removed) {
    return false;
  }
  PublishOnExit publish(this);
  ReleasedSegments released;
  events_.BeginCallerEvents(wait_for);
  FreeOneLocked(address, wait_for, &released);
  events_.EndCallerEvents(wait_for);
  return true;
}

void DeviceAllocator::FreeOneLocked(uint64_t address, absl::Span<const BackendEvent> wait_for,
                                    ReleasedSegments* released) {
  auto it = allocated_.find(address);
  if (it == allocated_.end()) AllocatedBlockOrDie(address);  // reports and aborts
  Block* block = it->second;
  allocated_.erase(it);
  block->allocated = false;
  const int pool = PoolStat(block->is_small);
  const bool oversize = block->size >= options_.max_split_size;
  if (!block->segment->leased)
    Charge(block->charged, [&](DeviceStats& s) {
      Decrease(s.allocation, pool, 1);
      Decrease(s.allocated_bytes, pool, Bytes(block->size));
      if (oversize) s.oversize_allocations.Decrease(1);
    });
  if (block->stream_uses.empty() && wait_for.empty()) {
    FreeBlockLocked(block, released);
    return;
  }
  // insert_events: the block stays active until the other streams' work is
  // done; free_block runs when its last event completes.
  events_.Insert(block, wait_for);
  if (block->event_count == 0) FreeBlockLocked(block, released);  // no event to wait on
}

void DeviceAllocator::FreeBlockLocked(Block* block, ReleasedSegments* released) {
  ClientState* charged = block->charged;
  ClientState* owner = block->owner;
  const int pool_stat = PoolStat(block->is_small);
  const int64_t original_size = Bytes(block->size);
  const int64_t requested = Bytes(block->requested_size);
  if (!block->segment->leased)
    Charge(charged, [&](DeviceStats& s) {
      Decrease(s.active, pool_stat, 1);
      Decrease(s.active_bytes, pool_stat, original_size);
      Decrease(s.requested_bytes, pool_stat, requested);
    });
  block->charged = owner;
  if (block->segment->dedicated) {
    ReleaseSegmentLocked(block, released);  // never cached
  } else {
    int64_t net_blocks = 0;
    int64_t net_bytes = 0;
    for (Block* candidate : {block->prev, block->next}) {
      const uint64_t subsumed = TryMergeLocked(block, candidate);
      if (subsumed > 0) {
        net_blocks -= 1;
        net_bytes -= Bytes(subsumed);
      }
    }
    CacheBlockLocked(block);
    if (block->is_split()) {
      net_blocks += 1;
      net_bytes += Bytes(block->size);
    }
    if (!block->segment->expandable) {  // expandable segments count no inactive_split
      Charge(owner, [&](DeviceStats& s) {
        if (net_blocks > 0) Increase(s.inactive_split, pool_stat, net_blocks);
        if (net_blocks < 0) Decrease(s.inactive_split, pool_stat, -net_blocks);
        if (net_bytes > 0) Increase(s.inactive_split_bytes, pool_stat, net_bytes);
        if (net_bytes < 0) Decrease(s.inactive_split_bytes, pool_stat, -net_bytes);
      });
    }
    // Nobody can reuse a removed client's cache: return it at once.
    if (owner->removed) {
      EmptyCacheResult ignored;
      ReleaseFreeBlockLocked(block, released, &ignored);
    }
  }
  if (charged != owner) MaybeForgetClientLocked(charged);
  MaybeForgetClientLocked(owner);
}

uint64_t DeviceAllocator::TryMergeLocked(Block* dst, Block* src) {
  if (src == nullptr || src->allocated || src->event_count > 0 || src->mapped != dst->mapped) {
    return 0;
  }
  if (dst->prev == src) {  // [src dst]
    dst->address = src->address;
    dst->prev = src->prev;
    if (dst->prev != nullptr) {
      dst->prev->next = dst;
    } else {
      dst->segment->head = dst;
    }
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  const uint64_t subsumed = src->size;
  if (src->mapped) {
    src->pool->Erase(src);
  } else {
    src->pool->EraseUnmapped(src);
  }
  dst->size += subsumed;
  arena_.Delete(src);
  return subsumed;
}

void DeviceAllocator::CacheBlockLocked(Block* block) {
  block->gc_count_base = block->owner->free_block_calls[block->is_small ? 0 : 1];
  block->pool->Insert(block);
}

void DeviceAllocator::ReleaseSegmentLocked(Block* block, ReleasedSegments* released) {
  Segment* segment = block->segment;
  ClientState* owner = segment->owner;
  absl::Status status = backend_->ReturnSegment(device_, segment->address);
  if (!status.ok()) {
    // The backend keeps what it could not free; the books must still balance.
    spdlog::error("allocator: releasing segment {} at {:#x} on GPU {}: {}", segment->id.value(),
                  segment->address, device_.value(), status.ToString());
  }
  const int pool = PoolStat(segment->is_small);
  const bool oversize = segment->size >= options_.max_split_size;
  Charge(owner, [&](DeviceStats& s) {
    Decrease(s.segment, pool, 1);
    Decrease(s.reserved_bytes, pool, Bytes(segment->size));
    if (oversize) s.oversize_segments.Decrease(1);
    ++s.num_device_free;
  });
  if (owner->tenant != nullptr) owner->tenant->reserved -= segment->size;
  released->push_back(Released{segment->id});
  arena_.Delete(block);
  const uint64_t address = segment->address;
  segments_.erase(address);  // destroys *segment
}

}  // namespace gpumux
