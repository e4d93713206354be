#pragma once

// torch.cuda.memory_snapshot() as plain structs: PyTorch's segment and block
// dicts (field for field, minus the always-empty `frames` and the default
// `segment_pool_id`) plus gpumux's owning session and segment id.

#include <cstdint>
#include <string>
#include <vector>

#include "gpumux/common/ids.h"

namespace gpumux {

struct BlockInfo {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  // "active_allocated", "active_pending_free" or "inactive".
  std::string state;
  // The session charged with the block; 0 for inactive blocks.
  SessionId session_id;
};

struct SegmentInfo {
  int32_t device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t allocated_size = 0;
  uint64_t active_size = 0;
  uint64_t requested_size = 0;
  uint64_t stream = 0;
  // "large" or "small".
  std::string segment_type;
  bool is_expandable = false;
  std::vector<BlockInfo> blocks;
  // gpumux additions.
  SessionId session_id;
  SegmentId segment_id;
  bool shareable = false;
  // Leased to the session, whose client carves the blocks (local
  // allocation); another process's view gets them from that client.
  bool leased = false;
  // A leased segment whose blocks the daemon could not get from its client
  // (it did not answer in time, or answered wrongly): no blocks, sizes 0,
  // and why.
  bool blocks_unavailable = false;
  std::string blocks_unavailable_reason;
};

}  // namespace gpumux
