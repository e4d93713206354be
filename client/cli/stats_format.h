#pragma once

// `gpumux stats` output: torch.cuda.memory_stats() as one JSON object (keys
// exactly PyTorch's 122, sorted, integer values, as json.dumps(indent=1)
// prints the dict) or as aligned "key value" lines.

#include <cstdint>
#include <map>
#include <string>

namespace gpumux {

// A key the daemon left out reads 0; keys PyTorch does not have are dropped.
std::string FormatStatsJson(const std::map<std::string, int64_t>& stats);
std::string FormatStatsLines(const std::map<std::string, int64_t>& stats);

}  // namespace gpumux
