#pragma once

// Conversions between the core's memory types and gpumux.v1 messages, shared
// by the Memory and Observe services.

#include <vector>

#include "allocator/caching_allocator.h"
#include "common/formats/memory_stats.h"
#include "gpumux/v1/common.pb.h"
#include "gpumux/v1/memory.pb.h"
#include "server/core/memory_manager.h"

namespace gpumux {

void ToProto(const AllocationView& view, v1::Allocation* out);
void ToProto(const DeviceStats& stats, v1::MemoryStats* out);
void ToProto(const std::vector<SegmentSnapshot>& segments, v1::MemorySnapshot* out);

}  // namespace gpumux
