#pragma once

// `gpumux snapshot` output: torch.cuda.memory_snapshot()'s list of segment
// dicts as JSON (PyTorch's keys in its order, segment_pool_id [0, 0], empty
// frames, plus gpumux's session_id, segment_id and shareable), or one table
// line per segment.

#include <string>

#include "gpumux/v1/common.pb.h"

namespace gpumux {

std::string FormatSnapshotJson(const v1::MemorySnapshot& snapshot);
std::string FormatSnapshotTable(const v1::MemorySnapshot& snapshot);

}  // namespace gpumux
