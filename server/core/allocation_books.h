#pragma once

// AllocationBooks: which session holds which allocation id. An allocator
// block is booked under the id its session allocated it with and gains an id
// per import; one holder is charged for it, and when that one drops it the
// oldest remaining holder is. Ids of one session are invisible to others:
// naming them is NOT_FOUND, as for ids never issued. Not thread-safe:
// MemoryManager's mutex guards it.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"

namespace gpumux {

// An allocation as its session sees it.
struct AllocationView {
  AllocationId id;
  DeviceIndex device;
  uint64_t requested_size = 0;
  uint64_t size = 0;  // rounded block size
  uint64_t address = 0;
  SegmentId segment_id;
  uint64_t segment_size = 0;
  uint64_t offset = 0;                                  // address - segment address
  std::shared_ptr<const SegmentHandle> segment_handle;  // shared with the segment
  // An expandable segment's (kHostPages, kCudaPages): the pages under the block.
  std::vector<PageHandle> pages;
};

// A byte range of an allocation that queued work reads or writes.
struct RangeUse {
  AllocationId id;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A booked block, whichever ids name it while it lives (ShareTokens names
// blocks by it). Never reused.
using BlockId = StrongId<struct BlockIdTag, uint64_t>;

class AllocationBooks {
 public:
  // One allocator block, referenced by one or more allocation ids.
  struct Block {
    BlockId id;
    AllocationView view;     // as the allocator handed it out (view.id unset)
    SessionId allocated_by;  // whose stream ids the allocator knows it by
    bool shareable = false;
    bool leased = false;  // a lease (MemoryManager::Lease), which the session's client carves
    SessionId charged;    // whose stats carry it
    absl::InlinedVector<AllocationId, 1> refs;  // oldest first
    // MemoryManager::HoldAllocations using it now: counted by the caller,
    // which frees no block while this is above 0.
    int holds = 0;
  };

  // What DropReference did.
  struct Dropped {
    BlockId block;
    DeviceIndex device;
    uint64_t address = 0;
    uint64_t size = 0;  // the block's
    uint64_t segment_size = 0;
    bool imported = false;  // the id was an import
    bool last = false;      // the block's last id: the block is gone, its memory to be freed
    // Not the last, and the holder charged for the block dropped it: the
    // holder now charged (the oldest remaining), no longer counting it as
    // imported.
    std::optional<SessionId> heir;
  };

  explicit AllocationBooks(int device_count) : device_count_(device_count) {}

  // Opens a session's books; precondition: they are not open.
  void AddSession(SessionId session);
  bool HasSession(SessionId session) const { return sessions_.contains(session); }
  // Closes them; precondition: the session holds no id (DropReference each
  // of SessionIds first).
  void RemoveSession(SessionId session);
  // The session's ids, ascending; none for a session not open.
  std::vector<AllocationId> SessionIds(SessionId session) const;
  // Per device, bytes of the blocks the session imported and is not
  // charged for; empty for a session not open.
  std::vector<uint64_t> ImportedBytes(SessionId session) const;
  // The sessions holding a live lease on `device`, in no order.
  std::vector<SessionId> SessionsWithLeases(DeviceIndex device) const;

  // Books a block the session allocated and is charged for, and returns its
  // view under a new id. Precondition: the session is open.
  AllocationView AddBlock(SessionId session, AllocationView view, bool shareable, bool leased);
  // A new id of `block` for `session`, which imports it: charged to its
  // holder, it counts in the session's ImportedBytes. Preconditions: the
  // session is open and the block lives.
  AllocationView AddImport(SessionId session, BlockId block);
  // Drops a live id (precondition); the block goes with its last id.
  Dropped DropReference(AllocationId id);

  // The block of the session's live id `id`; NOT_FOUND "allocation N not
  // found: ..." otherwise. Valid until the block's last id is dropped.
  absl::StatusOr<const Block*> Find(SessionId session, AllocationId id) const;
  // Its view under `id`; NOT_FOUND as Find.
  absl::StatusOr<AllocationView> Lookup(SessionId session, AllocationId id) const;
  // The block under `range`: NOT_FOUND as Find, OUT_OF_RANGE when the range
  // does not fit the allocation's requested size.
  absl::StatusOr<Block*> FindRange(SessionId session, const RangeUse& range);
  // Whether no block of `ids` is held (ids not live count as not held).
  bool NoneHeld(absl::Span<const AllocationId> ids) const;

 private:
  struct Reference {
    SessionId session;
    Block* block = nullptr;
    bool imported = false;
  };
  struct SessionBooks {
    absl::flat_hash_set<AllocationId> ids;
    std::vector<uint32_t> leases;          // per device: live leases
    std::vector<uint64_t> imported_bytes;  // per device
  };

  AllocationView AddReference(SessionId session, Block* block, bool imported);

  const int device_count_;
  uint64_t next_allocation_id_ = 1;
  uint64_t next_block_id_ = 1;
  absl::flat_hash_map<AllocationId, Reference> refs_;
  // Node-based: references and callers hold pointers to blocks.
  absl::node_hash_map<BlockId, Block> blocks_;
  absl::flat_hash_map<SessionId, SessionBooks> sessions_;
};

}  // namespace gpumux
