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
// A block lives in one lease; the daemon knows local memory as (lease id,
// offset in the segment), which is how copies, memsets and fills name it.
// Work the daemon queues on a block is recorded on it (RecordDaemonWork), so
// the block is not reused before that work completed, even by direct writes
// through its pointer: the block's free records an event on each stream that
// worked on it, and the allocator reuses the block once they completed. On
// CUDA the free also waits on the caller's own CUDA work (the free fence of
// cuda_free_fence.h), as the daemon-side path does.
//
// Thread-safe (the allocator has a lock per device; the lease and event
// tables have their own).

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
#include "client/client.h"
#include "common/ids.h"
#include "common/memory_stats.h"
#include "common/sealed_memory.h"
#include "common/segment_source.h"
#include "common/stats_page.h"

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
};

class LocalAllocator {
 public:
  // `impl` must outlive this; `options` are the daemon's (SessionOpened's
  // allocator_conf) unless the client configured its own.
  LocalAllocator(Client::Impl& impl, int device_count, std::vector<uint64_t> total_memory,
                 const AllocatorOptions& options);
  ~LocalAllocator();
  LocalAllocator(const LocalAllocator&) = delete;
  LocalAllocator& operator=(const LocalAllocator&) = delete;

  // The allocator's errors, except that a bad device is refused in the
  // daemon's words, and an allocation that failed because the daemon refused
  // a lease fails with the daemon's refusal: only the daemon knows which
  // limit held (the session's, its tenant's, the device's).
  absl::StatusOr<LocalBlock> Allocate(DeviceIndex device, StreamId stream, uint64_t size);
  // Allocate when it can be served at once from the cache (CachingAllocator::
  // TryAllocateCached); nullopt otherwise.
  std::optional<LocalBlock> TryAllocateCached(DeviceIndex device, StreamId stream, uint64_t size);
  // Frees a block from Allocate; its reuse waits for the daemon's work
  // recorded on it, for every stream RecordStream named, for each of
  // `completed` (queries of events the caller waits on) to return true and,
  // for a block mapped on CUDA device `cuda_device` (-1: none), for the
  // calling thread's CUDA work queued so far (a free fence).
  void Free(DeviceIndex device, uint64_t address, int cuda_device,
            absl::Span<std::function<bool()>> completed = {});
  // Free when it can be done at once (CachingAllocator::TryFree): false, with
  // nothing done, otherwise.
  bool TryFree(DeviceIndex device, uint64_t address, int cuda_device);
  // tensor.record_stream(stream).
  void RecordStream(DeviceIndex device, uint64_t address, StreamId stream);
  // The daemon queued work on the block on `stream` (its completion is not
  // waited for by the caller).
  void RecordDaemonWork(DeviceIndex device, uint64_t address, StreamId stream);

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
  // on (common/stats_page.h), before each Allocate and Free returns. Call
  // before any allocation.
  void AttachStatsPage(SealedMemory memory, MemoryMapping mapping, StatsPageWriter writer);
  bool has_stats_page() const { return stats_page_.has_value(); }
  // The page's mapping, for tests that play a hostile client.
  void* StatsPageForTest() const { return mapping_.data(); }

 private:
  class LeaseSource;
  // The block of `result`, in its lease; an internal error (the block freed
  // again) when no lease holds it.
  absl::StatusOr<LocalBlock> BlockOf(DeviceIndex device, const AllocationResult& result);

  Client::Impl& impl_;
  const ClientId client_;
  std::unique_ptr<LeaseSource> source_;
  // The stats page, kept mapped while the allocator publishes to it.
  std::optional<SealedMemory> stats_memory_;
  MemoryMapping mapping_;
  std::optional<StatsPageWriter> stats_page_;
  CachingAllocator allocator_;
};

}  // namespace gpumux
