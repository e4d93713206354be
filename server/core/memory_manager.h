#pragma once

// MemoryManager: device memory as sessions see it, the facade the RPC layer
// and other core units call. It owns the caching allocator and composes the
// units above it: AllocationBooks (which session holds which allocation id),
// ShareTokens, MemoryLimit and SegmentSubscribers. Ids of one session are
// invisible to others: naming them is NOT_FOUND, as for ids never issued.
// Thread-safe: one mutex guards the books and the tokens together.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "allocator/caching_allocator.h"
#include "common/base/request_limits.h"
#include "common/formats/memory_stats.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"
#include "server/core/allocation_books.h"
#include "server/core/memory_limit.h"
#include "server/core/segment_subscribers.h"
#include "server/core/session_registry.h"
#include "server/core/share_tokens.h"
#include "server/core/stats_pages.h"
#include "server/core/stream_manager.h"

namespace gpumux {

// A session's books on one device (MemoryManager::Usage).
struct SessionDeviceBooks {
  DeviceIndex device;
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t allocations = 0;
  uint64_t imported_bytes = 0;
  uint64_t limit_bytes = 0;
  uint64_t peak_allocated_bytes = 0;  // allocated_bytes.all.peak
  uint64_t peak_reserved_bytes = 0;   // reserved_bytes.all.peak
};

// Where a RangeUse lies on the device.
struct DeviceSpan {
  DeviceIndex device;
  uint64_t address = 0;  // of the range's first byte
};

// What ReleaseSession reclaimed, for its one log line.
struct ReleaseSummary {
  uint64_t allocations = 0;  // own allocations freed
  uint64_t allocated_bytes = 0;
  uint64_t segments = 0;  // segments returned to the backend
  uint64_t reserved_bytes = 0;
  uint64_t imports_dropped = 0;    // references to other sessions' memory
  uint64_t handed_over = 0;        // shared allocations now charged to an importer
  uint64_t handed_over_bytes = 0;  // their (dedicated) segments' bytes
};

// Daemon-wide budget (gpumuxd --max-share-tokens): share tokens of all live
// allocations, about 120 bytes each.
struct MemoryManagerLimits {
  size_t max_share_tokens = 262144;
};

class MemoryManager {
 public:
  // Share tokens one allocation may have been issued while it lives.
  static constexpr size_t kMaxTokensPerAllocation = ShareTokens::kMaxPerAllocation;
  using Limits = MemoryManagerLimits;

  // `backend`, `sessions` and `streams` must outlive the manager. Becomes
  // `streams`' stream destroyer (DestroyStream below) until destroyed.
  // With `memory_files` (which must outlive it too), sessions that allocate
  // locally get stats pages (GetStatsPage).
  MemoryManager(DeviceBackend* backend, const AllocatorOptions& options, SessionRegistry* sessions,
                StreamManager* streams, Limits limits = {},
                MemoryFileTable* memory_files = nullptr);
  ~MemoryManager();

  // Starts the books for an open session, a client of `tenant` (non-empty)
  // in the allocator, whose tenant limits then cover its segments.
  // `share_tenant` (NamedTenant) takes the share tokens' share.
  void AddSession(SessionId session, const std::string& tenant,
                  const std::string& share_tenant = "");
  // Frees everything the session holds and returns its cached segments.
  // Shared allocations others imported stay alive, charged to an importer.
  ReleaseSummary ReleaseSession(SessionId session);

  // INVALID_ARGUMENT naming the valid range when `device` is out of range.
  absl::Status CheckDevice(DeviceIndex device) const;

  // Most allocation ids one free request (Free, or the frees riding on an
  // Allocate) may name, and most wait event handles it may carry: a request
  // is checked and applied in time linear in its size, and these bound it.
  static constexpr size_t kMaxFreeIds = kMaxFreeIdsPerRequest;
  static constexpr size_t kMaxWaitEventHandles = kMaxWaitEventHandlesPerRequest;

  // Frees `frees` (as Free, waiting on `free_wait_event_handles`) and then
  // allocates for `stream` (as StreamManager::Resolve names it). Errors as
  // Free and Resolve, plus: INVALID_ARGUMENT for a bad size;
  // RESOURCE_EXHAUSTED when the memory is not there.
  // With `count_oom` false a refusal does not count in num_ooms (the caller
  // may yet relieve it, see PressureCandidates, and calls CountOom when it
  // gives up); ShortageOf(the refusal) names what refused it.
  absl::StatusOr<AllocationView> Allocate(
      SessionId session, DeviceIndex device, StreamId stream, uint64_t size, bool shareable,
      absl::Span<const AllocationId> frees = {},
      absl::Span<const std::string> free_wait_event_handles = {}, bool count_oom = true);
  // The fast path: leases a whole segment of `size` bytes (a multiple of
  // 2 MiB) on `device` for `stream`, which the session's client carves its
  // blocks from itself (CachingAllocator::Lease: the session's limit and the
  // device's memory are checked under the device's lock, the segment is
  // zeroed and the session's segment-level stats count it). The view's id
  // names the lease: Free returns it, copies and fills name local memory by
  // it and an offset into the segment, and the session's end returns it.
  // `frees` (earlier leases returned, allocations freed) apply first, as in
  // Allocate. Errors as Allocate.
  absl::StatusOr<AllocationView> Lease(SessionId session, DeviceIndex device, StreamId stream,
                                       uint64_t size, bool small_pool,
                                       absl::Span<const AllocationId> frees = {},
                                       bool count_oom = true);
  // One more OOM of the session on `device` (num_ooms): a refusal made with
  // count_oom false stands.
  void CountOom(SessionId session, DeviceIndex device) { allocator_.CountOom(device, session); }

  // A figure that changes with each allocation and free of `session`, on
  // any device, as its books and its stats page show them
  // (ClientQueries::LeaseBlocks reuses an answer while it stays).
  uint64_t BlocksVersion(SessionId session) const;

  // Memory pressure across processes: the sessions other than `session`
  // whose clients allocate locally and hold cached leases on `device` that
  // could relieve `shortage` (every such session for a full device, those of
  // `session`'s tenant for its tenant's limit, none for its own limit, whose
  // relief is its own cache). Cached: reserved over allocated by their stats
  // pages, or any lease at all for a session without a page.
  // A session asked before that returned nothing is left out until its
  // figures on `device` change (AskToRelease).
  std::vector<SessionId> PressureCandidates(SessionId session, DeviceIndex device,
                                            Shortage shortage) const;
  // Runs `ask`, which asks `holders` (PressureCandidates) to return their
  // cached leases on `device` and waits for their answers, and notes each
  // holder whose reserved bytes there did not drop: PressureCandidates leaves
  // it out until its reserved, allocated or active bytes there change. A
  // holder with nothing wholly free, which answers late or not at all, then
  // costs the deadline once, not at every allocation of every other session.
  void AskToRelease(DeviceIndex device, absl::Span<const SessionId> holders,
                    absl::FunctionRef<void()> ask);
  // Checks every id, then frees them all: INVALID_ARGUMENT for more than
  // kMaxFreeIds ids or kMaxWaitEventHandles handles, an id named twice or a
  // handle that is not kIpcEventHandleBytes long; NOT_FOUND for an id that
  // is not a live allocation of this session. The blocks freed are not
  // reused before each of `wait_event_handles` (interprocess events the
  // client recorded after its last use) completed; a handle the backend
  // cannot open fails the call (INVALID_ARGUMENT, or NOT_FOUND for an event
  // that is gone) before anything is freed. The books' lock is held only
  // for the lookups; the allocator returns the blocks after it is dropped.
  absl::Status Free(SessionId session, absl::Span<const AllocationId> ids,
                    absl::Span<const std::string> wait_event_handles = {});

  // The session's backend stream `stream` on `device` ends: blocks whose
  // queued work ran on it keep waiting for that work at their free
  // (CachingAllocator::RetireStream), then the backend destroys it. Under
  // the books' lock, so no work on allocations is queued on it meanwhile.
  absl::Status DestroyStream(DeviceIndex device, BackendStream stream);

  // tensor.record_stream(stream) for the session's allocation `id` and its
  // stream `stream` on the allocation's device. NOT_FOUND for an unknown
  // allocation or stream.
  absl::Status RecordStream(SessionId session, AllocationId id, StreamId stream);

  // The session's live allocation `id`; NOT_FOUND otherwise.
  absl::StatusOr<AllocationView> Lookup(SessionId session, AllocationId id) const;

  // Runs `enqueue` with the device addresses of `ranges` while none of their
  // allocations can be freed, then records `stream` on each allocation on
  // the stream's device (record_stream), so a Free right after waits for the
  // queued work. NOT_FOUND for an id that is not a live allocation of the
  // session; OUT_OF_RANGE when a range does not fit the allocation's
  // requested size; otherwise what `enqueue` returns (nothing is recorded
  // when it fails). `enqueue` must only queue work: it runs under the lock.
  absl::Status EnqueueOnAllocations(
      SessionId session, absl::Span<const RangeUse> ranges, const ResolvedStream& stream,
      absl::FunctionRef<absl::Status(absl::Span<const DeviceSpan>)> enqueue);
  // The same for work queued on several devices' streams (a collective):
  // each allocation is recorded on the one of `streams` on its device, if
  // any.
  absl::Status EnqueueOnAllocations(
      SessionId session, absl::Span<const RangeUse> ranges,
      absl::Span<const ResolvedStream> streams,
      absl::FunctionRef<absl::Status(absl::Span<const DeviceSpan>)> enqueue);

  // For work the daemon does on the memory itself rather than queue on a
  // stream (a group collective on host memory, DeviceBackend::AccessOnHost):
  // runs `use` with the device addresses of `ranges` outside the books' lock
  // while none of their allocations can be freed. A Free naming one of them
  // waits until `use` returned, and so does the session's end. Errors as
  // EnqueueOnAllocations, UNAUTHENTICATED for a closed session, or for one
  // that ended during the use (whatever it wrote went with the memory),
  // else what `use` returns. `use` must not free memory of the session.
  absl::Status HoldAllocations(SessionId session, absl::Span<const RangeUse> ranges,
                               absl::FunctionRef<absl::Status(absl::Span<const DeviceSpan>)> use)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A single-use token another session imports the allocation with.
  // FAILED_PRECONDITION unless it was allocated shareable;
  // RESOURCE_EXHAUSTED past kMaxTokensPerAllocation, the daemon's limit or
  // the session's tenant's share of it (ShareTokens::Issue).
  absl::StatusOr<std::string> Share(SessionId session, AllocationId id);
  // INVALID_ARGUMENT for a malformed token, NOT_FOUND for one never issued
  // or whose allocation is gone, FAILED_PRECONDITION for one already used.
  absl::StatusOr<AllocationView> Import(SessionId session, absl::string_view token);

  // Returns cached segments of the session, or of all sessions, to the backend.
  absl::StatusOr<EmptyCacheResult> EmptyCache(SessionId session, std::optional<DeviceIndex> device,
                                              bool all_sessions);

  // Sets the session's limit on `device` and returns it in bytes (0: none).
  // INVALID_ARGUMENT as LimitInBytes, or for a device out of range.
  absl::StatusOr<uint64_t> SetMemoryLimit(SessionId session, DeviceIndex device,
                                          const MemoryLimit& limit);

  // Caps the segments of all sessions of `tenant` together at `limit_bytes`
  // on `device`, or on every device when nullopt; 0 removes the cap
  // (CachingAllocator::SetTenantLimit: checked under the device's lock with
  // each new segment; lowering it refuses new segments, it takes nothing
  // away). A tenant need not have sessions yet. INVALID_ARGUMENT for a bad
  // tenant name (CheckTenantName) or a device out of range.
  absl::Status SetTenantLimit(const std::string& tenant, std::optional<DeviceIndex> device,
                              uint64_t limit_bytes);
  // Every tenant with a limit or a session, per device, by (tenant, device).
  // Allocated bytes include what its sessions publish on their stats pages.
  std::vector<TenantUsage> ListTenants() const;

  // The session's stats page (created on first call), which its client's
  // own allocator publishes to: from then on the session's and the device's
  // stats include the figures there (StatsPages judges them).
  // FAILED_PRECONDITION for a daemon without memory files to pass it.
  absl::StatusOr<StatsPageInfo> GetStatsPage(SessionId session);
  // Whether the session has a stats page, and whether the daemon rejected
  // figures of it.
  bool HasStatsPage(SessionId session) const;
  bool StatsPageRejected(SessionId session) const;

  // Device-wide stats, or one session's (NOT_FOUND when it is not open).
  // Both include what sessions publish on their stats pages.
  absl::StatusOr<DeviceStats> GetStats(DeviceIndex device, std::optional<SessionId> session) const;
  absl::Status ResetPeakStats(SessionId session, DeviceIndex device);
  absl::Status ResetAccumulatedStats(SessionId session, DeviceIndex device);
  absl::StatusOr<std::vector<SegmentSnapshot>> Snapshot(std::optional<DeviceIndex> device,
                                                        std::optional<SessionId> session) const;
  // Per device figures for the session list.
  std::vector<SessionDeviceBooks> Usage(SessionId session) const;
  ShareCounts share_counts() const;

  int device_count() const { return allocator_.device_count(); }
  const CachingAllocator& allocator() const { return allocator_; }

 private:
  // What AskToRelease compares: a session's figures on one device.
  struct CacheFigures {
    int64_t reserved = 0;
    int64_t allocated = 0;
    int64_t active = 0;
    bool operator==(const CacheFigures&) const = default;
  };
  // What the manager keeps of an open session beside its books.
  struct OpenSession {
    std::string share_tenant;  // NamedTenant: whose share its share tokens take
    // Per device: its figures when asked to return its cache it returned
    // nothing; not asked again while they are the same.
    std::vector<std::optional<CacheFigures>> fruitless;
    // Allocate and Free calls between their books and the allocator now,
    // and HoldAllocations' uses; ReleaseSession waits for them.
    int calls_in_flight = 0;
    bool ending = false;  // ReleaseSession is waiting for them
  };
  // Blocks a free returns to the allocator once mu_ is dropped, and the
  // opened wait events they share, per device.
  struct DeviceFrees {
    std::vector<uint64_t> addresses;
    std::vector<BackendEvent> wait_for;
  };
  using PendingFrees = std::vector<DeviceFrees>;

  // INVALID_ARGUMENT for a request over its bounds, a malformed handle or an
  // id named twice. Needs no lock.
  static absl::Status CheckFreeRequest(absl::Span<const AllocationId> ids,
                                       absl::Span<const std::string> wait_event_handles);
  // Allocate and Lease: checks, applies the frees, runs `allocate` and books
  // the block it returns for the session.
  absl::StatusOr<AllocationView> AllocateWith(
      SessionId session, DeviceIndex device, StreamId stream, absl::Span<const AllocationId> frees,
      absl::Span<const std::string> free_wait_event_handles, bool shareable, bool leased,
      absl::FunctionRef<absl::StatusOr<AllocationResult>()> allocate) ABSL_LOCKS_EXCLUDED(mu_);
  // Free after CheckFreeRequest.
  absl::Status FreeChecked(SessionId session, absl::Span<const AllocationId> ids,
                           absl::Span<const std::string> wait_event_handles)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Opens every handle once per device that the free of the session's
  // (checked) `ids` returns blocks of.
  absl::Status OpenWaitEventsLocked(SessionId session, absl::Span<const AllocationId> ids,
                                    absl::Span<const std::string> handles, PendingFrees* frees)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyFrees(const PendingFrees& frees) ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a call of an open session in flight (else UNAUTHENTICATED "session
  // N is closed"); EndCall ends it.
  absl::Status BeginCall(SessionId session) ABSL_LOCKS_EXCLUDED(mu_);
  void EndCall(SessionId session) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops one reference (AllocationBooks::DropReference) and settles what
  // that leaves: a block left without any joins `frees` and its share tokens
  // go; one handed over is recharged to its heir.
  void DropReferenceLocked(AllocationId id, ReleaseSummary* summary, PendingFrees* frees)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // record_stream of `block` for `stream` of `session`.
  void RecordStreamLocked(const AllocationBooks::Block& block, SessionId session,
                          const ResolvedStream& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The session's daemon-side stats on `device` merged with its page's.
  DeviceStats SessionStatsWithPage(DeviceIndex device, SessionId session) const;
  CacheFigures CacheFiguresOf(DeviceIndex device, SessionId session) const;

  DeviceBackend* backend_;
  SessionRegistry* sessions_;
  StreamManager* streams_;
  // Before the allocator, whose callbacks tell them of released segments.
  SegmentSubscribers subscribers_;
  CachingAllocator allocator_;
  std::unique_ptr<StatsPages> pages_;  // null without memory files

  mutable absl::Mutex mu_;
  AllocationBooks books_ ABSL_GUARDED_BY(mu_);
  ShareTokens tokens_ ABSL_GUARDED_BY(mu_);
  // Node-based: ReleaseSession waits on one session's entry with mu_ released.
  absl::node_hash_map<SessionId, OpenSession> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
