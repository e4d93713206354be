#pragma once

// CachingAllocator: PyTorch's CUDA caching allocator (DeviceCachingAllocator)
// over segments from a SegmentSource, one instance per device behind one
// front. Beyond PyTorch it keeps the books per client (a daemon session):
// every block and segment is charged to one client, each client has its own
// DeviceStats with PyTorch's 122 keys and an optional byte limit, and free
// blocks are reused only for the client and stream that allocated them.
// Clients may belong to a tenant (a pod's several processes), and a tenant
// may have a byte limit per device over all its clients' segments together,
// checked under the device's mutex with each new segment's charge, so that
// clients allocating concurrently can never together pass it.
// As in PyTorch, a freed block that other streams used (RecordStream) is not
// reused until the work queued on them by the time of the free has completed
// ("active_pending_free"); Free can also be told to wait on caller events,
// which RemoveClient drops unwaited for the removed client's blocks.
//
// Thread-safe: each device has its own mutex; calls on different devices run
// in parallel. Backend calls (segments and the events of pending frees)
// happen under the device's mutex, as PyTorch calls cudaMalloc and
// cudaEventSynchronize under its lock. The only waits there (EmptyCache,
// the OOM retry, RemoveClient) are for the allocator's own pooled events,
// recorded on daemon streams; caller `wait_for` events are only ever
// queried, so a client that never completes one cannot wedge the device.
// The segment-released callback runs after the mutex is dropped.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "allocator/allocator_config.h"
#include "common/formats/memory_stats.h"
#include "common/segments/segment_source.h"
#include "gpumux/common/ids.h"

namespace gpumux {

// Who is charged for a block or segment: the daemon uses the session id.
using ClientId = SessionId;

class DeviceAllocator;

// What went back to the backend: a whole segment (size 0), or the pages
// [offset, offset + size) of an expandable one.
struct ReleasedMemory {
  SegmentId segment;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// What refused an allocation or lease (RESOURCE_EXHAUSTED from Allocate or
// Lease), ordered by how much releasing cached segments helps: the client's
// own limit (its cache), its tenant's limit (the tenant's clients' caches),
// the device's memory (every client's cache). kNone for a status that is
// not such a refusal.
enum class Shortage { kNone, kClientLimit, kTenantLimit, kDevice };
Shortage ShortageOf(const absl::Status& status);

struct AllocationResult {
  uint64_t address = 0;         // device address of the block
  uint64_t size = 0;            // rounded block size
  uint64_t requested_size = 0;  // as asked
  SegmentId segment_id;
  uint64_t segment_address = 0;
  uint64_t segment_size = 0;
  // Shared with the segment: no copy of the handle per allocation.
  std::shared_ptr<const SegmentHandle> segment_handle;
};

// kActivePendingFree: freed, but waiting for events (other streams' work);
// it counts as active, not as allocated, and is not yet reusable.
// kUnknown: only in snapshots, the one block spanning a leased segment whose
// client did not give its blocks (SegmentSnapshot::blocks_unavailable), so
// that PyTorch's tools, which want each segment's blocks to sum to its size,
// read it; it counts as neither active nor allocated.
enum class BlockState { kActiveAllocated, kActivePendingFree, kInactive, kUnknown };

// PyTorch's snapshot name of a state: "active_allocated",
// "active_pending_free" or "inactive"; "unknown" for kUnknown.
const char* BlockStateName(BlockState state);
// The state BlockStateName names, kUnknown excepted (a client's answer
// cannot be unknown); nullopt for any other string.
std::optional<BlockState> ParseBlockState(absl::string_view name);

struct BlockSnapshot {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  BlockState state = BlockState::kInactive;
  ClientId client;  // charged client of an active block; 0 for inactive blocks
};

struct SegmentSnapshot {
  DeviceIndex device;
  SegmentId id;
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t allocated_size = 0;
  uint64_t active_size = 0;
  uint64_t requested_size = 0;
  StreamId stream;
  ClientId client;  // the client whose stream the segment serves
  bool is_small = false;
  bool dedicated = false;  // a shareable allocation's own segment
  // Leased to `client`, which carves its blocks itself: `blocks` is empty
  // here (the client's allocator has them) and the sizes are 0.
  bool leased = false;
  // One mapped run of an expandable segment (`id` is the segment's, shared
  // by its runs; `total_size` the run's), as PyTorch reports them.
  bool is_expandable = false;
  std::vector<BlockSnapshot> blocks;  // by address
  // Set by whoever fills a leased segment's blocks from its client (the
  // daemon) when it could not: why. Empty otherwise.
  std::string blocks_unavailable;
};

// One tenant's books on one device (ListTenants).
struct TenantUsage {
  std::string tenant;
  DeviceIndex device;
  uint64_t limit_bytes = 0;       // 0 = none
  uint64_t reserved_bytes = 0;    // segments of its clients
  uint64_t allocated_bytes = 0;   // blocks charged to its clients
  std::vector<ClientId> clients;  // its clients on the device, by id
};

struct EmptyCacheResult {
  uint64_t released_bytes = 0;
  uint64_t released_segments = 0;
};

class CachingAllocator {
 public:
  // Runs without allocator locks held, once per segment returned to the backend.
  using SegmentReleasedCallback = std::function<void(DeviceIndex, SegmentId)>;
  // Runs without allocator locks held, once per run of an expandable
  // segment's pages unmapped: [offset, offset + size) from the segment's start.
  using PagesUnmappedCallback =
      std::function<void(DeviceIndex, SegmentId, uint64_t offset, uint64_t size)>;

  // `backend` must outlive the allocator.
  CachingAllocator(SegmentSource* backend, AllocatorOptions options,
                   SegmentReleasedCallback on_segment_released = nullptr);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Set before the allocator is used; may stay unset.
  void SetPagesUnmappedCallback(PagesUnmappedCallback on_pages_unmapped) {
    on_pages_unmapped_ = std::move(on_pages_unmapped);
  }

  int device_count() const { return static_cast<int>(devices_.size()); }
  const AllocatorOptions& options() const { return options_; }

  // PyTorch's malloc: first frees the pending blocks whose events completed
  // (process_events: one query per stream with events outstanding, nothing
  // when there are none), then best fit among the client's cached blocks of
  // `stream`, else a new segment, else free cached memory and retry (first
  // ending the pending frees it can, as EmptyCache does: a block still
  // waiting on a caller event is not released). With `dedicated` the block gets a
  // segment of its own (rounded to 2 MiB, never split or cached: freeing it
  // returns the segment to the backend).
  // Errors: INVALID_ARGUMENT for a device out of range, size 0, or a size
  // above the device's total memory (or >= 1 EB); RESOURCE_EXHAUSTED with
  // PyTorch's OOM text (plus the client's figures) when neither the device
  // nor the client's limit nor its tenant's can fit it, even after releasing
  // cached segments: the client's own when its limit is the obstacle, those
  // of every client of its tenant when the tenant's limit is, every client's
  // when the device is full (the OOM text then also names the tenant, its
  // limit and its reserved bytes when it has a limit). Other backend errors
  // pass through unchanged.
  // ShortageOf(the refusal) names its obstacle. With `count_oom` false a
  // refusal does not count in num_ooms: the caller may yet get the memory
  // elsewhere (other processes' caches) and calls CountOom when it gives up.
  absl::StatusOr<AllocationResult> Allocate(DeviceIndex device, ClientId client, StreamId stream,
                                            uint64_t size, bool dedicated = false,
                                            bool count_oom = true);

  // A whole segment of `size` bytes for `client` to carve its own blocks
  // from (the client runs this allocator over its leases): the client's
  // limit, its tenant's and the device's memory are checked as for a new
  // segment of Allocate, with the same retries (the client's cached segments
  // here, its tenant's, then every client's when the device is full), and the
  // segment-level stats
  // (segment, reserved_bytes, num_device_alloc; in the small pool when
  // `small_pool`) count it; the block-level ones (allocation, allocated,
  // active, requested bytes) do not. Free of its address returns it, after
  // the work RecordStream named, like any block. Errors as Allocate, plus
  // INVALID_ARGUMENT for a size that is not a multiple of 2 MiB (PyTorch's
  // segment sizes all are), or a small-pool one that is not 2 MiB.
  absl::StatusOr<AllocationResult> Lease(DeviceIndex device, ClientId client, StreamId stream,
                                         uint64_t size, bool small_pool, bool count_oom = true);
  // One more OOM of `client` on `device` (num_ooms), for a refusal made
  // with count_oom false that stands.
  void CountOom(DeviceIndex device, ClientId client);

  // Allocate for a caller that must not wait (Python's, holding its
  // interpreter lock): the block when the device's lock is free this instant
  // and `client`'s cache for `stream` holds a block that fits, reached with
  // no backend call (no pending free to retire, no garbage collection);
  // nullopt otherwise, also for a request Allocate would refuse, and then
  // nothing changed: the caller goes on with Allocate, which may wait.
  std::optional<AllocationResult> TryAllocateCached(DeviceIndex device, ClientId client,
                                                    StreamId stream, uint64_t size);

  // Allocate while `stream` captures a CUDA graph (PyTorch skips
  // process_events then: querying an event is illegal during a capture): a
  // block from `client`'s cache for `stream`, with no backend call at all
  // (no pending free retired, no garbage collection, no new segment, no
  // cache released); FAILED_PRECONDITION when the cache holds none that
  // fits. Other errors as Allocate's.
  absl::StatusOr<AllocationResult> AllocateDuringCapture(DeviceIndex device, ClientId client,
                                                         StreamId stream, uint64_t size);

  // PyTorch's free: allocation, allocated_bytes and oversize_allocations drop
  // now. Without stream uses and `wait_for` events the block returns to its
  // pool at once and coalesces with free neighbours (free_block). Otherwise
  // (insert_events) an event from the device's pool is recorded on each
  // stream in its stream uses, and the block stays active and unusable,
  // shown as kActivePendingFree, until those and every `wait_for` event have
  // completed; then free_block runs (and active, active_bytes and
  // requested_bytes drop). `wait_for` events must already be recorded (e.g.
  // an interprocess event a client recorded on its own stream); ownership
  // passes to the allocator, which destroys each once no block waits on it
  // any more. They are never waited for, only queried (each Allocate,
  // EmptyCache, the OOM retry), so the block stays pending for as long as
  // one has not completed. They count as work of the block's charged client:
  // RemoveClient of that client stops waiting on them without even a query.
  // (The daemon frees a block only for the session charged with it: the
  // charge moves to an importer when the owner leaves.) Event errors from
  // the backend are logged and count as completion.
  // Precondition: `address` is a live block from Allocate on `device`
  // (callers validate their ids; this crashes on a broken invariant).
  void Free(DeviceIndex device, uint64_t address, absl::Span<const BackendEvent> wait_for = {});
  // Free for a caller that must not wait: false, with nothing done, when the
  // device's lock is held elsewhere or the free needs the backend (events to
  // record on the streams of RecordStream, a segment to return); the caller
  // then calls Free. Precondition as Free's.
  bool TryFree(DeviceIndex device, uint64_t address, absl::Span<const BackendEvent> wait_for = {});
  // Free of every one of `addresses` (distinct live blocks), each waiting on
  // every one of `wait_for`: one event serves them all. The device's lock is
  // taken in slices, so a long batch does not hold back other clients.
  void FreeBatch(DeviceIndex device, absl::Span<const uint64_t> addresses,
                 absl::Span<const BackendEvent> wait_for = {});

  // The backend stream `backend_stream` on `device` is about to be
  // destroyed, and no more work will be queued on it: live blocks whose
  // RecordStream named it keep waiting, at their Free, for the work queued
  // there so far (one event is recorded on it now when any block names it).
  // The caller destroys the stream after this returns.
  void RetireStream(DeviceIndex device, BackendStream backend_stream);

  // PyTorch's recordStream: the live block at `address` was used by work on
  // `backend_stream`, which the block's client knows as `stream`; its reuse
  // after Free waits for the work queued there until the Free. Ignored when
  // `stream` is the block's allocation stream (reuse happens in that
  // stream's order anyway); recording one stream twice records it once.
  // `stream` is compared with the allocation stream's id as the block's
  // client names it, so a caller acting for another session must not pass
  // an id that aliases it. Precondition as for Free.
  // With `even_allocation_stream` the stream is recorded even when it is the
  // allocation stream: for work whose order the block's next user does not
  // share (the daemon's copies into memory the client also reads and writes
  // directly, in the client's allocator).
  void RecordStream(DeviceIndex device, uint64_t address, StreamId stream,
                    BackendStream backend_stream, bool even_allocation_stream = false);

  // Moves a live block's charge (and, for a dedicated block, its segment's) to
  // another client: used when a shared allocation's owner leaves. A block of
  // a shared (non-dedicated) segment still returns to its segment owner's
  // cache when freed. Precondition as for Free.
  void Recharge(DeviceIndex device, uint64_t address, ClientId new_client);

  // torch.cuda.empty_cache: ends the pending frees (of blocks in `client`'s
  // segments, or all) that it can, then returns every cached, unsplit free
  // segment of `client` (or of every client) on `device` (or every device)
  // to the backend. Ending a pending free waits for its pooled events
  // (RecordStream's work on daemon streams) and queries its `wait_for`
  // events: a block with one not yet completed stays pending (active, its
  // segment not released) and is left for a later Allocate or EmptyCache.
  // Counts num_sync_all_streams on the device (and on `client` when given).
  EmptyCacheResult EmptyCache(std::optional<DeviceIndex> device, std::optional<ClientId> client);

  // Forgets a client: ends the pending frees of its blocks and segments,
  // releases its cached segments on every device and drops its stats and
  // limit. The `wait_for` events of blocks charged to it are destroyed
  // without waiting and count as completed: they stand for work of its own
  // process, which has ended (or given up the memory) when its session
  // does, and an event a killed process recorded may never complete
  // (waiting on it would wedge the device). The pooled events of those
  // pending frees (RecordStream's work on daemon streams) are waited for;
  // other clients' `wait_for` events on blocks recharged away from it in its
  // segments are only queried, as in EmptyCache. Precondition: the client
  // holds no live blocks. A segment of the client that still holds a block
  // recharged to another client, live or pending, is released as soon as it
  // is free (a pending one: at the Allocate or EmptyCache on the device
  // that finds its events completed); the client's books go with it.
  void RemoveClient(ClientId client);

  // Byte cap on the segments reserved for `client` on `device`; 0 = no limit.
  // Like set_per_process_memory_fraction it is checked before each new segment.
  void SetMemoryLimit(DeviceIndex device, ClientId client, uint64_t limit_bytes);
  uint64_t GetMemoryLimit(DeviceIndex device, ClientId client) const;

  // Puts `client` in `tenant` (non-empty) on every device, moving its
  // reserved bytes from its previous tenant's books to the new one's (a
  // tenant's limit is not checked for that: only new segments are refused).
  // The daemon calls it as a session starts, before its first allocation; a
  // client never put in a tenant has none. RemoveClient takes it out.
  void SetClientTenant(ClientId client, const std::string& tenant);

  // Byte cap on the segments reserved for all clients of `tenant` together on
  // `device`, or on every device when nullopt; 0 = no limit. Checked before
  // each new segment after the client's own limit; lowering it below what
  // the tenant holds refuses new segments until enough are released. A
  // tenant's limit stays when its last client goes, for its next ones.
  // Precondition: `device` in range (callers validate).
  void SetTenantLimit(std::optional<DeviceIndex> device, const std::string& tenant,
                      uint64_t limit_bytes);
  // Every tenant with a limit or a client, on `device` (every device when
  // nullopt), sorted by (tenant, device).
  std::vector<TenantUsage> ListTenants(std::optional<DeviceIndex> device) const;

  // Runs `publish(device, stats)` with a device's device-wide stats at the
  // end of every call that may change them, under that device's mutex (so
  // the last publication is the current figures). Set it before other calls.
  void SetStatsPublisher(std::function<void(DeviceIndex, const DeviceStats&)> publish);

  // Device-wide stats, or one client's (zeros for a client never seen).
  DeviceStats GetStats(DeviceIndex device) const;
  DeviceStats GetClientStats(DeviceIndex device, ClientId client) const;
  // PyTorch's reset semantics, for the device-wide stats or one client's.
  void ResetPeakStats(DeviceIndex device, std::optional<ClientId> client);
  void ResetAccumulatedStats(DeviceIndex device, std::optional<ClientId> client);

  // Segments sorted by (device, address), filtered by device and client.
  std::vector<SegmentSnapshot> Snapshot(std::optional<DeviceIndex> device,
                                        std::optional<ClientId> client) const;

 private:
  DeviceAllocator& DeviceOrDie(DeviceIndex device) const;
  // INVALID_ARGUMENT for a device out of range or a size Allocate refuses.
  absl::Status CheckRequest(DeviceIndex device, uint64_t size) const;
  void NotifyReleased(DeviceIndex device,
                      const absl::InlinedVector<ReleasedMemory, 4>& released) const;

  SegmentSource* backend_;
  AllocatorOptions options_;
  SegmentReleasedCallback on_segment_released_;
  PagesUnmappedCallback on_pages_unmapped_;
  std::atomic<uint64_t> next_segment_id_{1};  // relaxed: only uniqueness matters
  std::vector<std::unique_ptr<DeviceAllocator>> devices_;
};

}  // namespace gpumux
