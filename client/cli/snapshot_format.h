#pragma once

// `gpumux snapshot` output: torch.cuda.memory_snapshot()'s list of segment
// dicts as JSON (PyTorch's keys in its order, segment_pool_id [0, 0], empty
// frames, plus gpumux's session_id, segment_id and shareable), or one table
// line per segment.

#include <string>
#include <vector>

#include "gpumux/memory_snapshot.h"

namespace gpumux {

std::string FormatSnapshotJson(const std::vector<SegmentInfo>& segments);
std::string FormatSnapshotTable(const std::vector<SegmentInfo>& segments);

}  // namespace gpumux
