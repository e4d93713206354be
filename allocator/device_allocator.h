#pragma once

// DeviceAllocator: PyTorch's DeviceCachingAllocator for one device, with the
// books kept per client. Free blocks sit in a small and a large BlockPool per
// (client, stream), ordered by (size, address), so a client only ever reuses
// its own blocks of the same stream. Every stat change lands on the
// device-wide DeviceStats and on one client's: segment-level stats (segment,
// reserved, inactive_split, device allocs/frees) on the segment's owner,
// block-level ones (allocation, allocated, active, requested) on the client
// the block is charged to; the two differ only after Recharge.
//
// Freed blocks that other streams used (RecordStream) or that the caller asks
// to wait on stay pending, active but out of every pool, until their events
// complete (BlockEvents); every Allocate first retires completed ones,
// EmptyCache and the OOM retry wait for the pooled ones (never for caller
// events, which they only query), and RemoveClient drops the caller events
// of the removed client's blocks.
//
// Thread-safe: one mutex guards everything, and the backend is called under
// it (as PyTorch calls cudaMalloc under its lock). Methods that return
// segments (or an expandable segment's pages) to the backend append them to
// `released`; the caller runs its callbacks after the method returns, with
// the mutex dropped.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "allocator/allocator_config.h"
#include "allocator/block.h"
#include "allocator/block_arena.h"
#include "allocator/block_events.h"
#include "allocator/block_pool.h"
#include "allocator/caching_allocator.h"
#include "allocator/client_state.h"
#include "allocator/tenant_state.h"

namespace gpumux {

// Marks `status` (a refusal) with what refused it, for ShortageOf.
void SetShortage(Shortage shortage, absl::Status& status);

class DeviceAllocator {
 public:
  using Released = ReleasedMemory;
  using ReleasedSegments = absl::InlinedVector<ReleasedMemory, 4>;

  // `backend` must outlive this; `next_segment_id` is shared by the devices of
  // one CachingAllocator so that segment ids are unique across them.
  DeviceAllocator(DeviceIndex device, SegmentSource* backend, const AllocatorOptions& options,
                  std::atomic<uint64_t>* next_segment_id);
  // Returns every segment still held to the backend (without callbacks).
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // The contracts of CachingAllocator's methods of the same names, for this
  // device. `size` is already validated (non-zero, within the device).
  absl::StatusOr<AllocationResult> Allocate(ClientId client, StreamId stream, uint64_t size,
                                            bool dedicated, bool count_oom,
                                            ReleasedSegments* released);
  absl::StatusOr<AllocationResult> Lease(ClientId client, StreamId stream, uint64_t size,
                                         bool small_pool, bool count_oom,
                                         ReleasedSegments* released);
  std::optional<AllocationResult> TryAllocateCached(ClientId client, StreamId stream,
                                                    uint64_t size);
  absl::StatusOr<AllocationResult> AllocateDuringCapture(ClientId client, StreamId stream,
                                                         uint64_t size);
  void CountOom(ClientId client);
  void Free(absl::Span<const uint64_t> addresses, absl::Span<const BackendEvent> wait_for,
            ReleasedSegments* released);
  bool TryFree(uint64_t address, absl::Span<const BackendEvent> wait_for);
  void RecordStream(uint64_t address, StreamId stream, BackendStream backend_stream,
                    bool even_allocation_stream);
  void RetireStream(BackendStream backend_stream);
  void Recharge(uint64_t address, ClientId new_client);
  EmptyCacheResult EmptyCache(std::optional<ClientId> client, ReleasedSegments* released);
  void RemoveClient(ClientId client, ReleasedSegments* released);
  void SetMemoryLimit(ClientId client, uint64_t limit_bytes);
  void SetClientTenant(ClientId client, const std::string& tenant);
  void SetTenantLimit(const std::string& tenant, uint64_t limit_bytes);
  // Appends this device's tenants, sorted by name.
  void AppendTenants(std::vector<TenantUsage>* out) const;
  uint64_t GetMemoryLimit(ClientId client) const;
  DeviceStats GetStats() const;
  DeviceStats GetClientStats(ClientId client) const;
  void ResetPeakStats(std::optional<ClientId> client);
  void ResetAccumulatedStats(std::optional<ClientId> client);
  // Runs `publish` with the device-wide stats, under the device's mutex,
  // at the end of every call that may change them; before any such call.
  void SetStatsPublisher(std::function<void(const DeviceStats&)> publish);
  // Appends this device's segments (of `client`'s, when given) by address.
  void AppendSnapshot(std::optional<ClientId> client, std::vector<SegmentSnapshot>* out) const;

 private:
  // Declared right after a MutexLock of mu_: publishes the stats as the
  // call ends, the mutex still held (so publications follow the changes'
  // order).
  class PublishOnExit {
   public:
    explicit PublishOnExit(DeviceAllocator* allocator) : allocator_(allocator) {}
    ~PublishOnExit() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (allocator_->publish_) allocator_->publish_(allocator_->stats_);
    }
    PublishOnExit(const PublishOnExit&) = delete;
    PublishOnExit& operator=(const PublishOnExit&) = delete;

   private:
    DeviceAllocator* allocator_;
  };

  // PyTorch's AllocParams.
  struct Request {
    ClientState* client = nullptr;
    StreamId stream;
    uint64_t size = 0;        // rounded
    uint64_t alloc_size = 0;  // size of a new segment
    bool is_small = false;
    bool dedicated = false;
    bool leased = false;        // implies dedicated
    BlockPool* pool = nullptr;  // the client's pool for stream and size class
    Block* block = nullptr;
    Shortage shortage = Shortage::kNone;  // why the last AllocBlockLocked found no segment
    bool count_oom = true;
    ReleasedSegments* released = nullptr;  // for pages compact mode unmaps
  };

  ClientState* ClientLocked(ClientId client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const ClientState* FindClientLocked(ClientId client) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Block* AllocatedBlockOrDie(uint64_t address) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The pages of expandable segments of a pool.
  uint64_t PageSizeFor(bool is_small) const {
    return is_small || options_.compact_segments ? kSmallPage : kLargePage;
  }
  bool GcEnabledFor(const ClientState* client) const {
    return options_.garbage_collection_threshold > 0 && client->limit > 0;
  }

  // malloc's steps, in PyTorch's order.
  Block* GetFreeBlockLocked(Request& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills `r` (its client set) for `size` bytes on `stream` and looks in
  // that stream's pool for a free block: r.block, or null.
  Block* FindCachedBlockLocked(Request& r, StreamId stream, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NewSegmentWithRetriesLocked(Request& r, ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AllocBlockLocked(Request& r, bool is_retry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GarbageCollectLocked(ClientState* client, ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReleaseAvailableCachedBlocksLocked(const Request& r, ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // release_cached_blocks over `only` (every client when null): first ends
  // the pending frees of blocks in its segments (all of them when null) that
  // it can (SynchronizeAndFreeEventsLocked); counts a num_sync_all_streams
  // on the device and on `requester` when given.
  EmptyCacheResult ReleaseCachedBlocksLocked(ClientState* only, ClientState* requester,
                                             ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // release_cached_blocks over every client of `tenant`: ends the pending
  // frees of blocks in their segments that it can, then releases their
  // caches; counts num_sync_all_streams as ReleaseCachedBlocksLocked.
  void ReleaseTenantCacheLocked(TenantState* tenant, ClientState* requester,
                                ReleasedSegments* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases every unsplit cached block of `client` (large pools first).
  EmptyCacheResult ReleaseClientCacheLocked(ClientState* client, ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<AllocationResult> TryAllocateCachedLocked(ClientId client, StreamId stream,
                                                          uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool TryFreeLocked(uint64_t address, absl::Span<const BackendEvent> wait_for)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AllocationResult AllocFoundBlockLocked(Request& r, uint64_t orig_size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OutOfMemoryLocked(const Request& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShouldSplit(const Block* block, uint64_t size) const;
  // r.shortage for `bytes` more of r.client's reserved memory: its limit or
  // its tenant's; kNone when they allow it.
  Shortage LimitShortageLocked(const Request& r, uint64_t bytes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Expandable segments (device_allocator_expandable.cc), PyTorch's
  // try_allocate_expandable_block and its helpers: sets r.block to a block of
  // r.size mapped in r's expandable segment, or r.shortage.
  absl::Status AllocExpandableLocked(Request& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // find_expandable_block: the first run of free and unmapped blocks with
  // r.size bytes in r.pool's expandable segments, or the unmapped block of a
  // new one (null with r.shortage when no range could be reserved).
  absl::StatusOr<Block*> FindExpandableBlockLocked(Request& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // map_block: maps the pages under the first `size` bytes of the unmapped
  // `to_map` and merges them into the free mapped block before it (if any);
  // returns the mapped block, or null with r.shortage.
  absl::StatusOr<Block*> MapBlockLocked(Request& r, Block* to_map, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // unmap_block: unmaps the whole pages of the free mapped `block` (in its
  // pool), the last `at_most` bytes of them when fewer; the parts of pages
  // around them stay mapped as free blocks. Returns the bytes unmapped.
  uint64_t UnmapBlockLocked(Block* block, ReleasedSegments* released, uint64_t at_most = UINT64_MAX)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Compact mode: before `bytes` more are mapped under `to_map` for r,
  // unmaps up to as many wholly free pages of r.client's expandable
  // segments, largest free blocks first, outside [keep_begin, keep_end) (the
  // run r is about to take) and away from to_map, so that its reserved bytes
  // grow only when no free page is left.
  void ReclaimFreePagesLocked(const Request& r, const Block* to_map, uint64_t bytes,
                              uint64_t keep_begin, uint64_t keep_end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the free mapped `block` of an expandable segment covers a whole
  // page, which unmapping it would give back.
  static bool HoldsWholePage(const Block* block);
  // release_expandable_segment: `block`, unmapped and the whole of its
  // segment, goes back to the backend with the segment's range.
  void ReleaseRangeLocked(Block* block, ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back what the free cached `block` (in its pool) holds: its segment
  // when it is a whole ordinary segment, the whole pages under it in an
  // expandable one (and the range when nothing else is left in it). Adds
  // what it gave back to `result`.
  void ReleaseFreeBlockLocked(Block* block, ReleasedSegments* released, EmptyCacheResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // process_events: frees the pending blocks whose events all completed.
  void ProcessEventsLocked(ReleasedSegments* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // synchronize_and_free_events over the pending blocks `wanted` selects,
  // waiting for pooled events only: caller events are queried, and blocks
  // with one still pending stay pending (BlockEvents::Synchronize).
  void SynchronizeAndFreeEventsLocked(absl::FunctionRef<bool(const Block*)> wanted,
                                      ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the caller-supplied events of the pending blocks `wanted` selects
  // without waiting (BlockEvents::AbandonForeign) and frees the blocks left
  // with none; returns how many it dropped.
  size_t AbandonCallerEventsLocked(absl::FunctionRef<bool(const Block*)> wanted,
                                   ReleasedSegments* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One block of Free, whose caller events the request holds.
  void FreeOneLocked(uint64_t address, absl::Span<const BackendEvent> wait_for,
                     ReleasedSegments* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // free_block: coalesce, cache (or release a dedicated segment), update stats.
  void FreeBlockLocked(Block* block, ReleasedSegments* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t TryMergeLocked(Block* dst, Block* src) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CacheBlockLocked(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // release_block: the unsplit free `block` (not in a pool) and its segment go
  // back to the backend.
  void ReleaseSegmentLocked(Block* block, ReleasedSegments* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant named `name`, created on first use.
  TenantState* TenantLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `client` out of its tenant's books (moving its reserved bytes out).
  void LeaveTenantLocked(ClientState* client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a tenant without limit or clients.
  void MaybeForgetTenantLocked(TenantState* tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a removed client's state once nothing refers to it.
  void MaybeForgetClientLocked(ClientState* client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Applies `f` to the device-wide stats and to `client`'s.
  template <typename F>
  void Charge(ClientState* client, F f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    f(stats_);
    f(client->stats);
  }

  const DeviceIndex device_;
  SegmentSource* const backend_;
  const AllocatorOptions options_;
  std::atomic<uint64_t>* const next_segment_id_;

  mutable absl::Mutex mu_;
  DeviceStats stats_ ABSL_GUARDED_BY(mu_);
  // Live blocks by address (PyTorch's allocated_blocks + active_blocks).
  absl::flat_hash_map<uint64_t, Block*> allocated_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ClientId, std::unique_ptr<ClientState>> clients_ ABSL_GUARDED_BY(mu_);
  ClientState* last_client_ ABSL_GUARDED_BY(mu_) = nullptr;  // lookup cache
  absl::flat_hash_map<std::string, std::unique_ptr<TenantState>> tenants_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, std::unique_ptr<Segment>> segments_ ABSL_GUARDED_BY(mu_);
  BlockArena arena_ ABSL_GUARDED_BY(mu_);
  BlockEvents events_ ABSL_GUARDED_BY(mu_);
  std::function<void(const DeviceStats&)> publish_;  // set before use; may be empty
};

}  // namespace gpumux
