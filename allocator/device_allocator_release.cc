#include "allocator/device_allocator.h"

#include <algorithm>
#include <vector>

#include "allocator/stat_updates.h"
#include "spdlog/spdlog.h"

// Giving cached memory back: garbage collection, PyTorch's two release steps
// of malloc, empty_cache, and forgetting clients.

namespace gpumux {

void DeviceAllocator::GarbageCollectLocked(ClientState* client, ReleasedSegments* released) {
  // garbage_collect_cached_blocks over this client's large pool, against its
  // limit (PyTorch's allowed_memory_maximum).
  const uint64_t gc_threshold = static_cast<uint64_t>(options_.garbage_collection_threshold *
                                                      static_cast<double>(client->limit));
  if (client->reserved() <= gc_threshold) return;
  const uint64_t target = client->reserved() - gc_threshold;
  const int64_t calls = client->free_block_calls[1];
  auto large_blocks = [client] {
    std::vector<Block*> blocks;
    for (const auto& [stream, pools] : client->streams) {
      for (const BlockPool::Entry& e : pools->large) blocks.push_back(e.block);
    }
    return blocks;
  };

  // What GC can give back: whole segments, and the whole free pages of
  // expandable ones.
  auto freeable_block = [](const Block* b) {
    return b->segment->expandable ? HoldsWholePage(b) : !b->is_split();
  };
  uint64_t total_age = 0;
  int freeable = 0;
  for (const Block* b : large_blocks()) {
    if (!freeable_block(b)) continue;
    total_age += static_cast<uint64_t>(calls - b->gc_count_base);
    ++freeable;
  }
  if (freeable == 0) return;
  EmptyCacheResult reclaimed;
  bool freed = true;
  while (reclaimed.released_bytes < target && freed && freeable > 0) {
    const double age_threshold = static_cast<double>(total_age) / freeable;
    freed = false;
    // Unmapping pages changes only unmapped blocks and the parts of pages
    // around them, never another block of the list.
    for (Block* b : large_blocks()) {
      const uint64_t age = static_cast<uint64_t>(calls - b->gc_count_base);
      if (!freeable_block(b) || static_cast<double>(age) < age_threshold) continue;
      freed = true;
      total_age -= age;
      --freeable;
      ReleaseFreeBlockLocked(b, released, &reclaimed);
    }
  }
}

bool DeviceAllocator::ReleaseAvailableCachedBlocksLocked(const Request& r,
                                                         ReleasedSegments* released) {
  if (options_.max_split_size == SIZE_MAX) return false;
  BlockPool& pool = *r.pool;
  const uint64_t key_size = std::max(r.size, options_.max_split_size);
  BlockPool::Iterator it = pool.LowerBound(key_size);
  std::vector<Block*> victims;
  bool enough = true;
  if (it == pool.end()) {
    // No single block is large enough: free oversize blocks from the largest.
    if (it == pool.begin()) return false;
    uint64_t total = 0;
    --it;
    while (total < key_size && it->size >= options_.max_split_size) {
      total += it->size;
      victims.push_back(it->block);
      if (it == pool.begin()) break;
      --it;
    }
    enough = total >= key_size;
  } else {
    victims.push_back(it->block);
  }
  for (Block* b : victims) {
    // Oversize free blocks are whole segments (but never expandable ones).
    if (b->is_split() || b->segment->expandable) continue;
    pool.Erase(b);
    ReleaseSegmentLocked(b, released);
  }
  return enough;
}

EmptyCacheResult DeviceAllocator::ReleaseCachedBlocksLocked(ClientState* only,
                                                            ClientState* requester,
                                                            ReleasedSegments* released) {
  ++stats_.num_sync_all_streams;
  if (requester != nullptr) ++requester->stats.num_sync_all_streams;
  if (only != nullptr) {
    // Only `only`'s cache is released, and a pending block returns to its
    // owner's pool: other clients' streams need not hold this one up.
    const ClientId id = only->id;
    SynchronizeAndFreeEventsLocked([only](const Block* b) { return b->owner == only; }, released);
    // A removed client's state goes with its last segment, which a pending
    // block just freed may have taken along.
    auto it = clients_.find(id);
    if (it == clients_.end()) return {};
    return ReleaseClientCacheLocked(it->second.get(), released);
  }
  // Before walking clients_: freeing pending blocks may forget removed clients.
  SynchronizeAndFreeEventsLocked([](const Block*) { return true; }, released);
  EmptyCacheResult result;
  for (const auto& [id, client] : clients_) {
    EmptyCacheResult one = ReleaseClientCacheLocked(client.get(), released);
    result.released_bytes += one.released_bytes;
    result.released_segments += one.released_segments;
  }
  return result;
}

void DeviceAllocator::ReleaseTenantCacheLocked(TenantState* tenant, ClientState* requester,
                                               ReleasedSegments* released) {
  ++stats_.num_sync_all_streams;
  ++requester->stats.num_sync_all_streams;
  // The tenant outlives this: it has a limit (the obstacle) and the
  // requester. Its removed clients may go with a pending block freed here.
  SynchronizeAndFreeEventsLocked([tenant](const Block* b) { return b->owner->tenant == tenant; },
                                 released);
  // Releasing segments touches no client state nor the set of clients.
  for (ClientState* client : tenant->clients) ReleaseClientCacheLocked(client, released);
}

EmptyCacheResult DeviceAllocator::ReleaseClientCacheLocked(ClientState* client,
                                                           ReleasedSegments* released) {
  // Segments return to the backend without touching client states, so
  // iterating clients_ around this is safe.
  EmptyCacheResult result;
  for (bool large : {true, false}) {
    for (const auto& [stream, pools] : client->streams) {
      BlockPool& pool = large ? pools->large : pools->small;
      // Unmapping an expandable segment's pages changes only unmapped
      // blocks and the parts of pages around them, never another block of
      // the copy.
      for (Block* b : pool.Blocks()) ReleaseFreeBlockLocked(b, released, &result);
    }
  }
  return result;
}

EmptyCacheResult DeviceAllocator::EmptyCache(std::optional<ClientId> client,
                                             ReleasedSegments* released) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  if (!client.has_value()) return ReleaseCachedBlocksLocked(nullptr, nullptr, released);
  auto it = clients_.find(*client);
  if (it == clients_.end()) return {};
  return ReleaseCachedBlocksLocked(it->second.get(), it->second.get(), released);
}

void DeviceAllocator::RemoveClient(ClientId client, ReleasedSegments* released) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  ClientState* state = it->second.get();
  // The caller events of the blocks it freed (in the daemon, the session a
  // block is charged to is the one that frees it) stand for its own
  // process's work, which ended with the session: a dead process never
  // completes them, so waiting could hang the device forever.
  const size_t abandoned =
      AbandonCallerEventsLocked([state](const Block* b) { return b->charged == state; }, released);
  if (abandoned > 0) {
    spdlog::debug("allocator: client {} removed from GPU {}: {} caller events dropped unwaited",
                  client.value(), device_.value(), abandoned);
  }
  // Removed before, it may have gone with a block just freed.
  it = clients_.find(client);
  if (it == clients_.end()) return;
  state = it->second.get();
  // Its other pending frees end next, waiting for the daemon streams' work
  // (other clients' events on blocks of its segments are only queried: one
  // still pending keeps its block, and the segment, until it completes).
  // They return to its cache (when it owns the segment) and stop referring
  // to its state. Removed before, it may go with them.
  SynchronizeAndFreeEventsLocked(
      [state](const Block* b) { return b->owner == state || b->charged == state; }, released);
  it = clients_.find(client);
  if (it == clients_.end()) return;
  state = it->second.get();
  ReleaseClientCacheLocked(state, released);
  state->removed = true;
  if (last_client_ == state) last_client_ = nullptr;
  if (state->stats.allocation[kAggregate].current != 0) {
    spdlog::warn("allocator: client {} removed from GPU {} with {} live blocks", client.value(),
                 device_.value(), state->stats.allocation[kAggregate].current);
  }
  MaybeForgetClientLocked(state);
}

void DeviceAllocator::MaybeForgetClientLocked(ClientState* client) {
  // `active` covers live blocks and pending frees, which point at the state.
  if (!client->removed || client->stats.segment[kAggregate].current != 0 ||
      client->expandable_segments != 0 || client->stats.active[kAggregate].current != 0) {
    return;
  }
  if (last_client_ == client) last_client_ = nullptr;
  LeaveTenantLocked(client);
  clients_.erase(client->id);
}

TenantState* DeviceAllocator::TenantLocked(const std::string& name) {
  std::unique_ptr<TenantState>& slot = tenants_[name];
  if (slot == nullptr) {
    slot = std::make_unique<TenantState>();
    slot->name = name;
  }
  return slot.get();
}

void DeviceAllocator::LeaveTenantLocked(ClientState* client) {
  TenantState* tenant = client->tenant;
  if (tenant == nullptr) return;
  tenant->reserved -= client->reserved();
  tenant->clients.erase(client);
  client->tenant = nullptr;
  MaybeForgetTenantLocked(tenant);
}

void DeviceAllocator::MaybeForgetTenantLocked(TenantState* tenant) {
  if (tenant->limit != 0 || !tenant->clients.empty()) return;
  const std::string name = tenant->name;  // the key outlives its erase
  tenants_.erase(name);
}

}  // namespace gpumux
