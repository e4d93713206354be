#include "client/proto_conversion.h"

namespace gpumux {

DeviceProperties FromProto(const v1::DeviceProperties& proto) {
  DeviceProperties properties;
  properties.index = proto.index();
  properties.name = proto.name();
  properties.backend = proto.backend();
  properties.total_memory = proto.total_memory();
  properties.free_memory = proto.free_memory();
  properties.major = proto.major();
  properties.minor = proto.minor();
  properties.multi_processor_count = proto.multi_processor_count();
  return properties;
}

BlockInfo FromProto(const v1::SnapshotBlock& proto) {
  BlockInfo block;
  block.address = proto.address();
  block.size = proto.size();
  block.requested_size = proto.requested_size();
  block.state = proto.state();
  block.session_id = SessionId(proto.session_id());
  return block;
}

SegmentInfo FromProto(const v1::SnapshotSegment& proto) {
  SegmentInfo segment;
  segment.device = proto.device();
  segment.address = proto.address();
  segment.total_size = proto.total_size();
  segment.allocated_size = proto.allocated_size();
  segment.active_size = proto.active_size();
  segment.requested_size = proto.requested_size();
  segment.stream = proto.stream();
  segment.segment_type = proto.segment_type();
  segment.is_expandable = proto.is_expandable();
  segment.blocks.reserve(proto.blocks_size());
  for (const v1::SnapshotBlock& block : proto.blocks()) segment.blocks.push_back(FromProto(block));
  segment.session_id = SessionId(proto.session_id());
  segment.segment_id = SegmentId(proto.segment_id());
  segment.shareable = proto.shareable();
  return segment;
}

std::map<std::string, int64_t> FromProto(const v1::MemoryStats& proto) {
  return std::map<std::string, int64_t>(proto.values().begin(), proto.values().end());
}

}  // namespace gpumux
