#pragma once

// torch.cuda.memory_snapshot()'s list of segment dicts as JSON: PyTorch's
// keys in its order, segment_pool_id [0, 0] and empty frames, plus
// gpumux's session_id, segment_id, shareable and leased (and
// blocks_unavailable with its reason where the daemon could not get a
// lease's blocks). `gpumux snapshot --json` and the C ABI's
// gpumux_memory_snapshot_json write it.

#include <string>
#include <vector>

#include "gpumux/memory_snapshot.h"

namespace gpumux {

std::string MemorySnapshotJson(const std::vector<SegmentInfo>& segments);

}  // namespace gpumux
