#pragma once

// Block and Segment: PyTorch's Block (a range of a segment, free, handed out,
// or freed but waiting for other streams' work, linked to its neighbours) and
// the backend segment it lives in. Plain data owned by a DeviceAllocator and
// touched only under its mutex.

#include <cstdint>
#include <memory>
#include <vector>

#include "common/segments/segment_source.h"
#include "gpumux/common/ids.h"

namespace gpumux {

class BlockPool;
struct ClientState;
struct Block;

// One range from SegmentSource::ObtainSegment, or an expandable segment: a
// range from SegmentSource::ReserveRange whose blocks cover all of it, the
// mapped ones free or live, the unmapped ones in their pool's unmapped set.
struct Segment {
  SegmentId id;
  uint64_t address = 0;
  uint64_t size = 0;
  std::shared_ptr<const SegmentHandle> handle;  // shared with every AllocationResult
  StreamId stream;
  ClientState* owner = nullptr;  // charged for the segment; its pool holds the free blocks
  Block* head = nullptr;         // the block at `address`
  bool is_small = false;
  bool dedicated = false;
  // Leased whole to a client that carves its own blocks (the fast path): a
  // dedicated segment whose one block stands for the lease, not for an
  // allocation, so only the segment-level stats count it.
  bool leased = false;
  bool expandable = false;
  uint64_t page_size = 0;  // expandable: pages are mapped and unmapped whole
};

// A stream other than its allocation stream that used a block (recordStream):
// the client's id for it, and the backend stream its work runs on.
struct StreamUse {
  StreamId stream;
  BackendStream backend_stream;
  friend bool operator==(const StreamUse&, const StreamUse&) = default;
};

// States: allocated; pending free (!allocated, event_count > 0: freed, but
// work recorded on other streams may still touch it, so it stays "active"
// and out of every pool); free (!allocated, event_count == 0, in its pool
// unless it is being freed or released right now).
struct Block {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;  // as asked, while allocated
  StreamId stream;
  // The segment's owner, whose pool (`pool`, for the block's stream and size
  // class) the block returns to when free.
  ClientState* owner = nullptr;
  BlockPool* pool = nullptr;  // null for dedicated segments, never cached
  // Whose stats carry the block while allocated: the owner unless Recharge
  // moved it.
  ClientState* charged = nullptr;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // neighbours inside the segment, by address
  Block* next = nullptr;
  int64_t gc_count_base = 0;  // owner's get_free_block count when it was cached
  // recordStream's set while allocated (usually empty, so it costs the hot
  // path nothing; never the block's own stream); turned into events when the
  // block is freed.
  std::vector<StreamUse> stream_uses;
  int event_count = 0;  // outstanding events of a pending free
  bool allocated = false;
  bool is_small = false;
  // False for the unmapped stretches of an expandable segment: no memory
  // behind them, never handed out, merged only with unmapped neighbours.
  bool mapped = true;

  bool is_split() const { return prev != nullptr || next != nullptr; }
  bool pending_free() const { return !allocated && event_count > 0; }
};

}  // namespace gpumux
