#include "allocator/device_allocator.h"

#include <algorithm>
#include <cstddef>

#include "allocator/stat_updates.h"

// The books: recharging blocks between clients, limits, stats and snapshots.

namespace gpumux {

namespace {

// Takes `n` off one client's books and puts it on another's; the device-wide
// totals do not change.
void Move(StatArray& from, StatArray& to, int pool, int64_t n) {
  Decrease(from, pool, n);
  Increase(to, pool, n);
}

void Move(Stat& from, Stat& to, int64_t n) {
  from.Decrease(n);
  to.Increase(n);
}

}  // namespace

void DeviceAllocator::Recharge(uint64_t address, ClientId new_client) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  Block* block = AllocatedBlockOrDie(address);
  ClientState* to = ClientLocked(new_client);
  ClientState* from = block->charged;
  if (from == to) return;
  DeviceStats& f = from->stats;
  DeviceStats& t = to->stats;
  const int pool = PoolStat(block->is_small);
  Move(f.allocation, t.allocation, pool, 1);
  Move(f.allocated_bytes, t.allocated_bytes, pool, Bytes(block->size));
  Move(f.active, t.active, pool, 1);
  Move(f.active_bytes, t.active_bytes, pool, Bytes(block->size));
  Move(f.requested_bytes, t.requested_bytes, pool, Bytes(block->requested_size));
  if (block->size >= options_.max_split_size)
    Move(f.oversize_allocations, t.oversize_allocations, 1);
  block->charged = to;

  Segment* segment = block->segment;
  if (segment->dedicated) {
    // The block is the whole segment: the segment changes hands too. (A
    // shared segment's block keeps returning to its owner's cache.)
    Move(f.segment, t.segment, pool, 1);
    Move(f.reserved_bytes, t.reserved_bytes, pool, Bytes(segment->size));
    if (segment->size >= options_.max_split_size) Move(f.oversize_segments, t.oversize_segments, 1);
    segment->owner = to;
    block->owner = to;
    // The segment's bytes follow it to the new owner's tenant, unchecked
    // against its limit like the owner's own: no new memory is reserved.
    if (from->tenant != to->tenant) {
      if (from->tenant != nullptr) from->tenant->reserved -= segment->size;
      if (to->tenant != nullptr) to->tenant->reserved += segment->size;
    }
  }
  MaybeForgetClientLocked(from);
}

void DeviceAllocator::SetStatsPublisher(std::function<void(const DeviceStats&)> publish) {
  absl::MutexLock lock(&mu_);
  publish_ = std::move(publish);
}

void DeviceAllocator::SetMemoryLimit(ClientId client, uint64_t limit_bytes) {
  absl::MutexLock lock(&mu_);
  ClientLocked(client)->limit = limit_bytes;
}

void DeviceAllocator::SetClientTenant(ClientId client, const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  ClientState* state = ClientLocked(client);
  if (state->tenant != nullptr && state->tenant->name == tenant) return;
  LeaveTenantLocked(state);
  TenantState* joined = TenantLocked(tenant);
  joined->clients.insert(state);
  joined->reserved += state->reserved();
  state->tenant = joined;
}

void DeviceAllocator::SetTenantLimit(const std::string& tenant, uint64_t limit_bytes) {
  absl::MutexLock lock(&mu_);
  if (limit_bytes > 0) {
    TenantLocked(tenant)->limit = limit_bytes;
    return;
  }
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return;
  it->second->limit = 0;
  MaybeForgetTenantLocked(it->second.get());
}

void DeviceAllocator::AppendTenants(std::vector<TenantUsage>* out) const {
  absl::MutexLock lock(&mu_);
  const size_t first = out->size();
  for (const auto& [name, tenant] : tenants_) {
    TenantUsage& usage = out->emplace_back();
    usage.tenant = name;
    usage.device = device_;
    usage.limit_bytes = tenant->limit;
    usage.reserved_bytes = tenant->reserved;
    for (const ClientState* client : tenant->clients) {
      usage.allocated_bytes +=
          static_cast<uint64_t>(client->stats.allocated_bytes[kAggregate].current);
      if (!client->removed) usage.clients.push_back(client->id);
    }
    std::sort(usage.clients.begin(), usage.clients.end());
  }
  std::sort(out->begin() + static_cast<std::ptrdiff_t>(first), out->end(),
            [](const TenantUsage& a, const TenantUsage& b) { return a.tenant < b.tenant; });
}

uint64_t DeviceAllocator::GetMemoryLimit(ClientId client) const {
  absl::MutexLock lock(&mu_);
  const ClientState* state = FindClientLocked(client);
  return state == nullptr ? 0 : state->limit;
}

DeviceStats DeviceAllocator::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

DeviceStats DeviceAllocator::GetClientStats(ClientId client) const {
  absl::MutexLock lock(&mu_);
  const ClientState* state = FindClientLocked(client);
  if (state != nullptr) return state->stats;
  DeviceStats zeros;
  zeros.max_split_size = stats_.max_split_size;
  return zeros;
}

void DeviceAllocator::ResetPeakStats(std::optional<ClientId> client) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  if (!client.has_value()) {
    stats_.ResetPeak();
  } else if (auto it = clients_.find(*client); it != clients_.end()) {
    it->second->stats.ResetPeak();
  }
}

void DeviceAllocator::ResetAccumulatedStats(std::optional<ClientId> client) {
  absl::MutexLock lock(&mu_);
  PublishOnExit publish(this);
  if (!client.has_value()) {
    stats_.ResetAccumulated();
  } else if (auto it = clients_.find(*client); it != clients_.end()) {
    it->second->stats.ResetAccumulated();
  }
}

namespace {

// Adds the block to a snapshot entry.
void AppendBlock(const Block* b, SegmentSnapshot* s) {
  if (s->is_expandable) s->total_size += b->size;
  BlockSnapshot& block = s->blocks.emplace_back();
  block.address = b->address;
  block.size = b->size;
  block.requested_size = b->requested_size;
  block.state = b->allocated        ? BlockState::kActiveAllocated
                : b->pending_free() ? BlockState::kActivePendingFree
                                    : BlockState::kInactive;
  if (block.state != BlockState::kInactive) {
    block.client = b->charged->id;
    if (b->allocated) s->allocated_size += b->size;
    s->active_size += b->size;
    s->requested_size += b->requested_size;
  }
}

}  // namespace

void DeviceAllocator::AppendSnapshot(std::optional<ClientId> client,
                                     std::vector<SegmentSnapshot>* out) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [address, segment] : segments_) {
    if (client.has_value() && segment->owner->id != *client) continue;
    // One entry for an ordinary segment; one for each run of mapped blocks
    // of an expandable one.
    for (const Block* head = segment->head; head != nullptr;) {
      if (!head->mapped) {
        head = head->next;
        continue;
      }
      SegmentSnapshot& s = out->emplace_back();
      s.device = device_;
      s.id = segment->id;
      s.address = head->address;
      s.total_size = segment->expandable ? 0 : segment->size;
      s.stream = segment->stream;
      s.client = segment->owner->id;
      s.is_small = segment->is_small;
      s.dedicated = segment->dedicated;
      s.leased = segment->leased;
      s.is_expandable = segment->expandable;
      if (segment->leased) break;
      const Block* b = head;
      for (; b != nullptr && b->mapped; b = b->next) AppendBlock(b, &s);
      head = b;
    }
  }
}

}  // namespace gpumux
