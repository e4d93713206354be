#pragma once

// `gpumux stats` output: torch.cuda.memory_stats() as one JSON object (keys
// exactly PyTorch's 122, sorted, integer values, as json.dumps(indent=1)
// prints the dict) or as aligned "key value" lines.

#include <string>

#include "gpumux/v1/common.pb.h"

namespace gpumux {

// A key the daemon left out reads 0; keys PyTorch does not have are dropped.
std::string FormatStatsJson(const v1::MemoryStats& stats);
std::string FormatStatsLines(const v1::MemoryStats& stats);

}  // namespace gpumux
