#pragma once

// The client's proto adapter: wire messages to the plain structs of its API.

#include <cstdint>
#include <map>
#include <string>

#include "client/device_properties.h"
#include "client/memory_snapshot.h"
#include "gpumux/v1/common.pb.h"
#include "gpumux/v1/device.pb.h"

namespace gpumux {

DeviceProperties FromProto(const v1::DeviceProperties& proto);
BlockInfo FromProto(const v1::SnapshotBlock& proto);
SegmentInfo FromProto(const v1::SnapshotSegment& proto);
// torch.cuda.memory_stats()'s dict: the keys as sent, sorted.
std::map<std::string, int64_t> FromProto(const v1::MemoryStats& proto);

}  // namespace gpumux
