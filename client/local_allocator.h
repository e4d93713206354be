#pragma once

// LocalAllocator: the fast path (docs/design.md, "Local allocation"). The
// client runs PyTorch's caching allocator (allocator/, the very code the
// daemon runs) in its own process over whole segments it leases from the
// daemon (Memory.Lease), so an allocation that the cache can serve costs no
// round trip. The daemon keeps the books that matter across processes: it
// checks each lease against the session's limit and the device's memory
// under its own lock, counts the lease in the session's reserved bytes, and
// takes every lease back when the session ends.
//
// Reuse is stream-ordered, as in PyTorch: pools are keyed by the process's
// own stream the block's work runs on (LocalStreams: its CUDA stream), and a
// freed block goes back to its pool at once, since later work on that
// stream runs after the work that used it. Waits are where PyTorch has
// them: a block RecordStream named another stream for gets one pooled
// event there at its free, and is reused once that completed (EmptyCache
// and the OOM retry wait for it); work the daemon queued on a block
// (RecordDaemonWork) is waited for through the daemon's events; and before
// a lease goes back to the daemon (empty_cache, the OOM retry, the
// daemon's pressure question, the allocator's end), the stream its blocks
// were used on is synchronized, as PyTorch's cudaFree synchronizes, since
// the daemon may zero it and hand it to another process. While a stream
// captures a CUDA graph nothing is queried or waited for and no lease is
// taken: an allocation is served from the cache or fails, and a free that
// would need events waits for the capture's end.
//
// A block lives in one lease; the daemon knows local memory as (lease id,
// offset in the segment), which is how copies, memsets and fills name it.
//
// Thread-safe (the allocator has a lock per device; the lease and event
// tables have their own).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "allocator/caching_allocator.h"
#include "common/formats/memory_stats.h"
#include "common/ipc/stats_page.h"
#include "common/segments/segment_source.h"
#include "gpumux/client.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/sealed_memory.h"
#include "gpumux/local_streams.h"

namespace gpumux {

// A block of the local allocator, as a DeviceBuffer carries it.
struct LocalBlock {
  AllocationId lease;  // the lease (an allocation id at the daemon) it lies in
  SegmentId segment_id;
  uint64_t address = 0;  // device address (the daemon's numbering)
  uint64_t offset = 0;   // in the lease's segment
  uint64_t size = 0;     // rounded
  uint64_t requested_size = 0;
  void* data = nullptr;  // this process's pointer; null where it cannot be mapped
  int cuda_device = -1;  // the mapping's CUDA ordinal, -1 for host memory
  LocalStream stream;    // the pool's: the stream its work runs on
};

class LocalAllocator {
 public:
  // `impl` and `streams` must outlive this; `options` are the daemon's
  // (SessionOpened's allocator_conf) unless the client configured its own.
  LocalAllocator(Client::Impl& impl, LocalStreams* streams, int device_count,
                 std::vector<uint64_t> total_memory, const AllocatorOptions& options);
  ~LocalAllocator();
  LocalAllocator(const LocalAllocator&) = delete;
  LocalAllocator& operator=(const LocalAllocator&) = delete;

  // A block for work on `stream`, from that stream's pool; a new segment is
  // leased on the daemon's stream `lease_stream`. The allocator's errors,
  // except that a bad device is refused in the daemon's words, and an
  // allocation that failed because the daemon refused a lease fails with
  // the daemon's refusal: only the daemon knows which limit held (the
  // session's, its tenant's, the device's). While `stream` captures a
  // graph: a cached block, or FAILED_PRECONDITION.
  absl::StatusOr<LocalBlock> Allocate(DeviceIndex device, LocalStream stream, StreamId lease_stream,
                                      uint64_t size);
  // Allocate when it can be served at once from the cache (CachingAllocator::
  // TryAllocateCached); nullopt otherwise.
  std::optional<LocalBlock> TryAllocateCached(DeviceIndex device, LocalStream stream,
                                              uint64_t size);
  // Frees a block from Allocate (`stream` is its LocalBlock's): back to its
  // pool now, unless other streams used it (RecordStream, RecordDaemonWork)
  // or the caller gave `completed` (queries of events it waits on), whose
  // work its reuse then waits for.
  void Free(DeviceIndex device, uint64_t address, LocalStream stream,
            absl::Span<std::function<bool()>> completed = {});
  // Free when it can be done at once (CachingAllocator::TryFree): false, with
  // nothing done, otherwise.
  bool TryFree(DeviceIndex device, uint64_t address);
  // tensor.record_stream(stream) for the block allocated for
  // `allocation_stream`: its reuse after Free waits for the work queued on
  // `stream` by then.
  void RecordStream(DeviceIndex device, uint64_t address, LocalStream allocation_stream,
                    LocalStream stream);
  // The daemon queued work on the block on its stream `stream` (its
  // completion is not waited for by the caller). Without
  // `even_allocation_stream`, a `stream` whose id is the block's pool's
  // (the host backend's pools are keyed by gpumux streams) is ignored.
  void RecordDaemonWork(DeviceIndex device, uint64_t address, StreamId stream,
                        bool even_allocation_stream = true);

  // torch.cuda.empty_cache() of the local cache: returns wholly free leases.
  EmptyCacheResult EmptyCache(std::optional<DeviceIndex> device);
  void SetMemoryLimit(DeviceIndex device, uint64_t bytes);
  DeviceStats Stats(DeviceIndex device) const;
  void ResetPeakStats(DeviceIndex device);
  void ResetAccumulatedStats(DeviceIndex device);
  std::vector<SegmentSnapshot> Snapshot(std::optional<DeviceIndex> device) const;

  // Leases held now.
  size_t lease_count() const;
  int device_count() const { return allocator_.device_count(); }

  // Publishes the allocator's figures on the session's stats page from now
  // on (common/ipc/stats_page.h), before each Allocate and Free returns. Call
  // before any allocation.
  void AttachStatsPage(SealedMemory memory, MemoryMapping mapping, StatsPageWriter writer);
  bool has_stats_page() const { return stats_page_.has_value(); }
  // The page's mapping, for tests that play a hostile client.
  void* StatsPageForTest() const { return mapping_.data(); }

 private:
  class LeaseSource;
  // The block of `result`, in its lease; an internal error (the block freed
  // again) when no lease holds it.
  absl::StatusOr<LocalBlock> BlockOf(DeviceIndex device, LocalStream stream,
                                     const AllocationResult& result);
  // Frees now what Free held back during a graph capture, where no stream
  // of the device captures any more.
  void FreeDeferred(DeviceIndex device);

  // A block RecordStream named other streams for, while allocated.
  struct Used {
    DeviceIndex device;
    uint64_t address = 0;
    template <typename H>
    friend H AbslHashValue(H h, const Used& u) {
      return H::combine(std::move(h), u.device, u.address);
    }
    friend bool operator==(const Used&, const Used&) = default;
  };

  Client::Impl& impl_;
  LocalStreams* const streams_;
  const ClientId client_;
  std::unique_ptr<LeaseSource> source_;
  // The stats page, kept mapped while the allocator publishes to it.
  std::optional<SealedMemory> stats_memory_;
  MemoryMapping mapping_;
  std::optional<StatsPageWriter> stats_page_;
  // Blocks RecordStream named other streams for, with the streams: their
  // frees record events, which a capture forbids.
  absl::Mutex used_mu_;
  absl::flat_hash_map<Used, std::vector<LocalStream>> used_ ABSL_GUARDED_BY(used_mu_);
  // Frees held back while a stream captured a graph, per device.
  absl::flat_hash_map<DeviceIndex, std::vector<uint64_t>> deferred_ ABSL_GUARDED_BY(used_mu_);
  // The entries of used_ and deferred_, for the hot paths to skip the
  // mutex while they are empty. Written under used_mu_; a release store
  // after the entry went in, read with acquire: a free that sees 0 was
  // ordered before any RecordStream of its block by the caller, as
  // tensor.record_stream precedes the tensor's release.
  std::atomic<size_t> used_count_{0};
  std::atomic<size_t> deferred_count_{0};
  CachingAllocator allocator_;
};

}  // namespace gpumux
