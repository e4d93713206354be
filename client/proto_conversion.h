#pragma once

// The client's proto adapter: wire messages to the plain structs of its API.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "gpumux/common/reduce_op.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_properties.h"
#include "gpumux/group_types.h"
#include "gpumux/memory_snapshot.h"
#include "gpumux/random_options.h"
#include "gpumux/session_info.h"
#include "gpumux/stream.h"
#include "gpumux/v1/comm.pb.h"
#include "gpumux/v1/common.pb.h"
#include "gpumux/v1/copy.pb.h"
#include "gpumux/v1/device.pb.h"
#include "gpumux/v1/group.pb.h"
#include "gpumux/v1/observe.pb.h"
#include "gpumux/v1/random.pb.h"
#include "gpumux/v1/stream.pb.h"

namespace gpumux {

DeviceProperties FromProto(const v1::DeviceProperties& proto);
BlockInfo FromProto(const v1::SnapshotBlock& proto);
SegmentInfo FromProto(const v1::SnapshotSegment& proto);
std::vector<SegmentInfo> FromProto(const v1::MemorySnapshot& proto);
SessionInfo FromProto(const v1::SessionInfo& proto);
DaemonGroupInfo FromProto(const v1::GroupInfo& proto);
// torch.cuda.memory_stats()'s dict: the keys as sent, sorted.
std::map<std::string, int64_t> FromProto(const v1::MemoryStats& proto);

v1::StreamRef ToProto(const Stream& stream);
// A segment of the local allocator as a lease_blocks answer lists it: its
// device, address, size and blocks.
void ToProto(const SegmentSnapshot& segment, v1::SnapshotSegment* out);
// CopyOptions for work queued on `stream` (already resolved from `options`).
v1::CopyOptions ToProto(const Stream& stream, const CopyOptions& options);
v1::Dtype ToProto(Dtype dtype);
// REDUCE_OP_UNSPECIFIED for a value out of range (the daemon refuses it).
v1::ReduceOp ToProto(ReduceOp op);

}  // namespace gpumux
