#pragma once

// torch.cuda.memory_summary(): PyTorch's table (torch/cuda/memory.py), line for
// line, from a flattened stats map.

#include <cstdint>
#include <map>
#include <string>

#include "common/formats/memory_stats.h"

namespace gpumux {

// `stats` holds the 122 keys of FlattenMemoryStats; a missing key reads as 0.
std::string FormatMemorySummary(const std::map<std::string, int64_t>& stats, int device,
                                bool abbreviated);
std::string FormatMemorySummary(const DeviceStats& stats, int device, bool abbreviated);

}  // namespace gpumux
