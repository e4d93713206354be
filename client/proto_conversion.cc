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
  properties.pci_bus_id = proto.pci_bus_id();
  properties.arch_list.assign(proto.arch_list().begin(), proto.arch_list().end());
  properties.gencode_flags = proto.gencode_flags();
  properties.driver_version = proto.driver_version();
  properties.runtime_version = proto.runtime_version();
  properties.collectives = proto.collectives();
  properties.healthy = proto.healthy();
  properties.health = proto.health();
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
  segment.leased = proto.leased();
  segment.blocks_unavailable = proto.blocks_unavailable();
  segment.blocks_unavailable_reason = proto.blocks_unavailable_reason();
  return segment;
}

void ToProto(const SegmentSnapshot& segment, v1::SnapshotSegment* out) {
  out->set_device(segment.device.value());
  out->set_address(segment.address);
  out->set_total_size(segment.total_size);
  out->mutable_blocks()->Reserve(static_cast<int>(segment.blocks.size()));
  for (const BlockSnapshot& b : segment.blocks) {
    v1::SnapshotBlock* block = out->add_blocks();
    block->set_address(b.address);
    block->set_size(b.size);
    block->set_requested_size(b.requested_size);
    block->set_state(BlockStateName(b.state));
  }
}

std::vector<SegmentInfo> FromProto(const v1::MemorySnapshot& proto) {
  std::vector<SegmentInfo> segments;
  segments.reserve(proto.segments_size());
  for (const v1::SnapshotSegment& segment : proto.segments())
    segments.push_back(FromProto(segment));
  return segments;
}

SessionInfo FromProto(const v1::SessionInfo& proto) {
  SessionInfo session;
  session.session_id = SessionId(proto.session_id());
  session.client_name = proto.client_name();
  session.pid = proto.pid();
  session.tenant = proto.tenant();
  session.labels.insert(proto.labels().begin(), proto.labels().end());
  session.opened_unix_micros = proto.opened_unix_micros();
  session.streams = proto.streams();
  session.events = proto.events();
  session.stats_page = proto.stats_page();
  session.stats_page_rejected = proto.stats_page_rejected();
  for (const v1::SessionDeviceUsage& usage : proto.devices()) {
    session.devices.push_back({.device = usage.device(),
                               .allocated_bytes = usage.allocated_bytes(),
                               .reserved_bytes = usage.reserved_bytes(),
                               .allocations = usage.allocations(),
                               .imported_bytes = usage.imported_bytes(),
                               .memory_limit_bytes = usage.memory_limit_bytes(),
                               .peak_allocated_bytes = usage.peak_allocated_bytes(),
                               .peak_reserved_bytes = usage.peak_reserved_bytes()});
  }
  return session;
}

std::map<std::string, int64_t> FromProto(const v1::MemoryStats& proto) {
  return std::map<std::string, int64_t>(proto.values().begin(), proto.values().end());
}

v1::StreamRef ToProto(const Stream& stream) {
  v1::StreamRef proto;
  proto.set_device(stream.device().value());
  proto.set_stream(stream.id().value());
  return proto;
}

v1::CopyOptions ToProto(const Stream& stream, const CopyOptions& options) {
  v1::CopyOptions proto;
  proto.set_stream(stream.id().value());
  proto.set_wait(options.wait);
  proto.set_completion_event(options.completion_event);
  return proto;
}

v1::Dtype ToProto(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32:
      return v1::DTYPE_FLOAT32;
    case Dtype::kFloat64:
      return v1::DTYPE_FLOAT64;
    case Dtype::kFloat16:
      return v1::DTYPE_FLOAT16;
    case Dtype::kBFloat16:
      return v1::DTYPE_BFLOAT16;
    case Dtype::kInt32:
      return v1::DTYPE_INT32;
    case Dtype::kInt64:
      return v1::DTYPE_INT64;
    case Dtype::kUInt8:
      return v1::DTYPE_UINT8;
  }
  return v1::DTYPE_UNSPECIFIED;  // the daemon refuses it: INVALID_ARGUMENT
}

v1::ReduceOp ToProto(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return v1::REDUCE_OP_SUM;
    case ReduceOp::kProduct:
      return v1::REDUCE_OP_PRODUCT;
    case ReduceOp::kMin:
      return v1::REDUCE_OP_MIN;
    case ReduceOp::kMax:
      return v1::REDUCE_OP_MAX;
    case ReduceOp::kAvg:
      return v1::REDUCE_OP_AVG;
  }
  return v1::REDUCE_OP_UNSPECIFIED;  // the daemon refuses it
}

DaemonGroupInfo FromProto(const v1::GroupInfo& proto) {
  DaemonGroupInfo info;
  info.name = proto.name();
  info.world_size = proto.world_size();
  info.rank = proto.rank();
  info.rendezvous_address = proto.rendezvous_address();
  info.generation = proto.generation();
  for (const v1::GroupMember& member : proto.members()) {
    info.members.push_back(DaemonGroupMember{member.rank(), member.address()});
  }
  info.timeout = absl::Milliseconds(proto.timeout_ms());
  info.state = proto.state();
  info.error = proto.error();
  info.collectives = proto.collectives();
  info.bytes = proto.bytes();
  info.formed_at = absl::FromUnixMillis(proto.formed_unix_ms());
  info.form_time = absl::Milliseconds(proto.form_ms());
  info.device = DeviceIndex(proto.device());
  info.device_communicator = proto.device_communicator();
  info.tenant = proto.tenant();
  info.owner = SessionId(proto.owner_session_id());
  return info;
}

}  // namespace gpumux
