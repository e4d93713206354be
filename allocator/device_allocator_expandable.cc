#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "allocator/device_allocator.h"
#include "allocator/stat_updates.h"
#include "spdlog/spdlog.h"

// Expandable segments: PyTorch's Note [Expandable Segments]. Per (client,
// stream, pool) one range of addresses, 9/8 of the device's memory, whose
// pages are mapped when a request finds no free block that fits and unmapped
// when they are wholly free and the cache is released. Blocks cover the whole
// range: mapped ones live or free (in the pool), unmapped ones in the pool's
// unmapped set; merges never mix the two.

namespace gpumux {
namespace {

uint64_t AlignDown(uint64_t value, uint64_t alignment) { return value / alignment * alignment; }
uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// A block a request may grow into: free (not live, not pending) or unmapped.
bool Allocatable(const Block* b) {
  return b != nullptr && !b->allocated && b->event_count == 0 && b->stream_uses.empty();
}

}  // namespace

Shortage DeviceAllocator::LimitShortageLocked(const Request& r, uint64_t bytes) const {
  const ClientState* client = r.client;
  if (client->limit > 0 && client->reserved() + bytes > client->limit)
    return Shortage::kClientLimit;
  // Under mu_ with the charge that follows: concurrent clients of the tenant
  // see each other's memory, so together they never pass its limit.
  const TenantState* tenant = client->tenant;
  if (tenant != nullptr && tenant->limit > 0 && tenant->reserved + bytes > tenant->limit) {
    return Shortage::kTenantLimit;
  }
  return Shortage::kNone;
}

absl::Status DeviceAllocator::AllocExpandableLocked(Request& r) {
  absl::StatusOr<Block*> found = FindExpandableBlockLocked(r);
  if (!found.ok() || *found == nullptr) return found.status();
  Block* candidate = *found;
  // The candidate starts a run with r.size bytes: unmapped, or free then
  // unmapped. Mapping merges each newly mapped stretch into the free block
  // before it.
  if (!candidate->mapped) {
    absl::StatusOr<Block*> mapped = MapBlockLocked(r, candidate, std::min(candidate->size, r.size));
    if (!mapped.ok() || *mapped == nullptr) return mapped.status();
    candidate = *mapped;
  }
  while (candidate->size < r.size) {
    Block* next = candidate->next;  // unmapped: free blocks never neighbour free ones
    absl::StatusOr<Block*> mapped =
        MapBlockLocked(r, next, std::min(r.size - candidate->size, next->size));
    if (!mapped.ok() || *mapped == nullptr) return mapped.status();
    candidate = *mapped;
  }
  r.pool->Erase(candidate);
  r.block = candidate;
  return absl::OkStatus();
}

absl::StatusOr<Block*> DeviceAllocator::FindExpandableBlockLocked(Request& r) {
  BlockPool& pool = *r.pool;
  auto has_room = [size = r.size](const Block* b) {
    uint64_t bytes = 0;
    while (bytes < size && Allocatable(b)) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  for (const auto& [address, unmapped] : pool.unmapped()) {
    // The lowest unmapped block may follow a free block the request can
    // take as well.
    Block* candidate = Allocatable(unmapped->prev) ? unmapped->prev : unmapped;
    if (has_room(candidate)) return candidate;
  }
  const uint64_t page = PageSizeFor(r.is_small);
  const uint64_t total = backend_->TotalMemory(device_);
  // 9/8 of the device, as PyTorch reserves, so that a run can always be
  // found past pages kept mapped lower down.
  const uint64_t size = AlignUp(total + total / 8, page);
  absl::StatusOr<BackendRange> range =
      backend_->ReserveRange(device_, size, page, r.stream, r.is_small);
  if (!range.ok()) {
    if (range.status().code() != absl::StatusCode::kResourceExhausted) return range.status();
    r.shortage = Shortage::kDevice;
    return nullptr;
  }
  auto segment = std::make_unique<Segment>();
  segment->id = SegmentId(next_segment_id_->fetch_add(1, std::memory_order_relaxed));
  segment->address = range->address;
  segment->size = range->size;
  segment->stream = r.stream;
  segment->owner = r.client;
  segment->is_small = r.is_small;
  segment->expandable = true;
  segment->page_size = page;
  segment->handle = std::make_shared<const SegmentHandle>(range->handle);

  Block* block = arena_.New();
  block->address = segment->address;
  block->size = segment->size;
  block->stream = r.stream;
  block->owner = block->charged = r.client;
  block->pool = r.pool;
  block->segment = segment.get();
  block->is_small = r.is_small;
  block->mapped = false;
  segment->head = block;
  segments_.emplace(segment->address, std::move(segment));
  ++r.client->expandable_segments;
  pool.InsertUnmapped(block);
  return block;
}

absl::StatusOr<Block*> DeviceAllocator::MapBlockLocked(Request& r, Block* to_map, uint64_t size) {
  Segment* segment = to_map->segment;
  // Unmapped blocks start and end on page boundaries.
  const uint64_t map_size = std::min(AlignUp(size, segment->page_size), to_map->size);
  if (options_.compact_segments) {
    // The run being built starts at or before to_map and ends r.size later.
    const uint64_t run_begin =
        to_map->prev != nullptr && to_map->prev->mapped && Allocatable(to_map->prev)
            ? to_map->prev->address
            : to_map->address;
    ReclaimFreePagesLocked(r, to_map, map_size, run_begin, run_begin + r.size + segment->page_size);
  }
  r.shortage = LimitShortageLocked(r, map_size);
  if (r.shortage != Shortage::kNone) return nullptr;
  absl::Status status = backend_->MapPages(device_, to_map->address, map_size);
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kResourceExhausted) return status;
    r.shortage = Shortage::kDevice;
    return nullptr;
  }
  BlockPool& pool = *to_map->pool;
  pool.EraseUnmapped(to_map);
  to_map->mapped = true;
  if (map_size < to_map->size) {
    // to_map -> remaining (unmapped) -> to_map->next
    Block* remaining = arena_.New();
    *remaining = *to_map;
    remaining->address = to_map->address + map_size;
    remaining->size = to_map->size - map_size;
    remaining->mapped = false;
    remaining->prev = to_map;
    if (remaining->next != nullptr) remaining->next->prev = remaining;
    to_map->next = remaining;
    to_map->size = map_size;
    pool.InsertUnmapped(remaining);
  }
  TryMergeLocked(to_map, to_map->prev);
  TryMergeLocked(to_map, to_map->next);
  CacheBlockLocked(to_map);

  ClientState* owner = segment->owner;
  const int pool_stat = PoolStat(segment->is_small);
  Charge(owner, [&](DeviceStats& s) {
    Increase(s.reserved_bytes, pool_stat, Bytes(map_size));
    ++s.num_device_alloc;
  });
  if (owner->tenant != nullptr) owner->tenant->reserved += map_size;
  return to_map;
}

bool DeviceAllocator::HoldsWholePage(const Block* block) {
  const Segment* segment = block->segment;
  const uint64_t page = segment->page_size;
  return AlignUp(block->address - segment->address, page) + page <=
         block->address + block->size - segment->address;
}

void DeviceAllocator::ReclaimFreePagesLocked(const Request& r, const Block* to_map, uint64_t bytes,
                                             uint64_t keep_begin, uint64_t keep_end) {
  // The client's free blocks with at least a page in them, largest first
  // (collected first: unmapping changes the pools).
  std::vector<Block*> candidates;
  for (const auto& [stream, pools] : r.client->streams) {
    for (const BlockPool* pool : {&pools->large, &pools->small}) {
      for (auto it = pool->end(); it != pool->begin();) {
        --it;
        Block* b = it->block;
        if (b->size < kSmallPage) break;  // no whole page in this or any smaller one
        const bool in_run = b->address < keep_end && b->address + b->size > keep_begin;
        // Unmapping a neighbour of to_map would merge to_map into it.
        const bool touches = b == to_map->prev || b == to_map->next;
        if (b->segment->expandable && !in_run && !touches) candidates.push_back(b);
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Block* a, const Block* b) { return a->size > b->size; });
  uint64_t reclaimed = 0;
  for (Block* b : candidates) {
    if (reclaimed >= bytes) break;
    reclaimed += UnmapBlockLocked(b, r.released, bytes - reclaimed);
  }
}

uint64_t DeviceAllocator::UnmapBlockLocked(Block* block, ReleasedSegments* released,
                                           uint64_t at_most) {
  Segment* segment = block->segment;
  const uint64_t page = segment->page_size;
  uint64_t begin = segment->address + AlignUp(block->address - segment->address, page);
  const uint64_t end =
      segment->address + AlignDown(block->address + block->size - segment->address, page);
  if (begin >= end) return 0;
  // The last pages when fewer are wanted: the block keeps its start.
  if (end - begin > at_most) begin = end - AlignUp(at_most, page);
  const uint64_t bytes = end - begin;
  absl::Status status = backend_->UnmapPages(device_, begin, bytes);
  if (!status.ok()) {
    // The pages stay mapped, and counted, under a free block.
    spdlog::error("allocator: unmapping {} bytes at {:#x} on GPU {}: {}", bytes, begin,
                  device_.value(), status.ToString());
    return 0;
  }
  released->push_back(Released{segment->id, begin - segment->address, bytes});
  BlockPool& pool = *block->pool;
  pool.Erase(block);
  // The parts of pages before and after stay mapped, as free blocks.
  if (begin > block->address) {
    Block* before = arena_.New();
    *before = *block;
    before->size = begin - block->address;
    before->next = block;
    if (before->prev != nullptr) {
      before->prev->next = before;
    } else {
      segment->head = before;
    }
    block->prev = before;
    CacheBlockLocked(before);
  }
  if (end < block->address + block->size) {
    Block* after = arena_.New();
    *after = *block;
    after->address = end;
    after->size = block->address + block->size - end;
    after->prev = block;
    if (after->next != nullptr) after->next->prev = after;
    block->next = after;
    CacheBlockLocked(after);
  }
  block->address = begin;
  block->size = bytes;
  block->mapped = false;
  TryMergeLocked(block, block->prev);
  TryMergeLocked(block, block->next);
  pool.InsertUnmapped(block);

  ClientState* owner = segment->owner;
  const int pool_stat = PoolStat(segment->is_small);
  Charge(owner, [&](DeviceStats& s) {
    Decrease(s.reserved_bytes, pool_stat, Bytes(bytes));
    ++s.num_device_free;
  });
  if (owner->tenant != nullptr) owner->tenant->reserved -= bytes;
  return bytes;
}

void DeviceAllocator::ReleaseRangeLocked(Block* block, ReleasedSegments* released) {
  Segment* segment = block->segment;
  ClientState* owner = segment->owner;
  block->pool->EraseUnmapped(block);
  absl::Status status = backend_->ReleaseRange(device_, segment->address);
  if (!status.ok()) {
    spdlog::error("allocator: releasing expandable segment {} at {:#x} on GPU {}: {}",
                  segment->id.value(), segment->address, device_.value(), status.ToString());
  }
  --owner->expandable_segments;
  released->push_back(Released{segment->id});
  arena_.Delete(block);
  const uint64_t address = segment->address;
  segments_.erase(address);  // destroys *segment
}

void DeviceAllocator::ReleaseFreeBlockLocked(Block* block, ReleasedSegments* released,
                                             EmptyCacheResult* result) {
  if (!block->segment->expandable) {
    if (block->is_split()) return;
    result->released_bytes += block->size;
    ++result->released_segments;
    block->pool->Erase(block);
    ReleaseSegmentLocked(block, released);
    return;
  }
  result->released_bytes += UnmapBlockLocked(block, released);
  // UnmapBlockLocked left `block` where the unmapped pages are (or unchanged,
  // mapped, when it had no whole page).
  if (!block->mapped && !block->is_split()) {
    ++result->released_segments;
    ReleaseRangeLocked(block, released);
  }
}

}  // namespace gpumux
