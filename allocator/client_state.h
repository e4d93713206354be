#pragma once

// ClientState: what a DeviceAllocator keeps per client (daemon session) on
// one device: its PyTorch stats, its byte limit, the get_free_block call
// counters that age cached blocks for garbage collection, its cached free
// blocks, one small and one large BlockPool per stream, and its tenant. Plain
// data guarded by the DeviceAllocator's mutex; blocks point at it directly.

#include <array>
#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "allocator/block_pool.h"
#include "common/formats/memory_stats.h"
#include "gpumux/common/ids.h"

namespace gpumux {

struct TenantState;

// The two pools of one (client, stream).
struct StreamPools {
  BlockPool small{/*is_small=*/true};
  BlockPool large{/*is_small=*/false};
};

struct ClientState {
  SessionId id;
  DeviceStats stats;
  // PyTorch's allowed_memory_maximum over this client's segments; 0 = none.
  uint64_t limit = 0;
  // The tenant whose limit also covers this client's segments; null: none.
  TenantState* tenant = nullptr;
  // PyTorch's BlockPool::get_free_blocks_call_count, per size class
  // (0 small, 1 large), over all of the client's streams.
  std::array<int64_t, 2> free_block_calls{};
  // RemoveClient ran while a segment of the client still had a block charged
  // to someone else; the state goes once its last segment does.
  bool removed = false;
  // Its expandable segments on the device (PyTorch counts them in no stat).
  int expandable_segments = 0;
  absl::flat_hash_map<StreamId, std::unique_ptr<StreamPools>> streams;

  uint64_t reserved() const {
    return static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current);
  }

  // The pools of `stream`, created on first use; stable for the state's life.
  StreamPools& PoolsFor(StreamId stream) {
    if (last_pools_ != nullptr && last_stream_ == stream) return *last_pools_;
    std::unique_ptr<StreamPools>& slot = streams[stream];
    if (slot == nullptr) slot = std::make_unique<StreamPools>();
    last_stream_ = stream;
    last_pools_ = slot.get();
    return *last_pools_;
  }

 private:
  StreamId last_stream_;  // lookup cache for PoolsFor
  StreamPools* last_pools_ = nullptr;
};

}  // namespace gpumux
