#include "server/rpc/session_proto.h"

#include <optional>

namespace gpumux {

SessionRecord FromProto(const v1::OpenSessionRequest& open) {
  SessionRecord info;
  info.client_name = open.client_name();
  info.pid = open.pid();
  info.tenant = open.tenant();
  info.labels.insert(open.labels().begin(), open.labels().end());
  info.records_host_calls = open.records_host_calls();
  return info;
}

void ToProto(const OpenedSession& opened, v1::SessionOpened* out) {
  out->set_session_id(opened.info.id.value());
  out->set_secret(opened.secret);
  out->set_tenant(opened.info.tenant);
}

v1::SessionServerMessage SegmentReleasedMessage(DeviceIndex device, SegmentId segment,
                                                uint64_t offset, uint64_t size) {
  v1::SessionServerMessage message;
  message.mutable_segment_released()->set_device(device.value());
  message.mutable_segment_released()->set_segment_id(segment.value());
  message.mutable_segment_released()->set_offset(offset);
  message.mutable_segment_released()->set_size(size);
  return message;
}

v1::SessionServerMessage ReleaseCachedMessage(uint64_t request, DeviceIndex device) {
  v1::SessionServerMessage message;
  message.mutable_release_cached()->set_request_id(request);
  message.mutable_release_cached()->set_device(device.value());
  return message;
}

v1::SessionServerMessage BlocksRequestMessage(uint64_t request) {
  v1::SessionServerMessage message;
  message.mutable_blocks_request()->set_request_id(request);
  return message;
}

v1::SessionServerMessage StartProfilingMessage(uint64_t window, uint64_t capacity) {
  v1::SessionServerMessage message;
  message.mutable_start_profiling()->set_window_id(window);
  message.mutable_start_profiling()->set_capacity(capacity);
  return message;
}

v1::SessionServerMessage StopProfilingMessage(uint64_t window) {
  v1::SessionServerMessage message;
  message.mutable_stop_profiling()->set_window_id(window);
  return message;
}

std::vector<SegmentSnapshot> FromProto(const v1::LeaseBlocks& answer) {
  std::vector<SegmentSnapshot> out;
  out.reserve(static_cast<size_t>(answer.segments_size()));
  for (const v1::SnapshotSegment& proto : answer.segments()) {
    SegmentSnapshot& segment = out.emplace_back();
    segment.device = DeviceIndex(proto.device());
    segment.address = proto.address();
    segment.blocks.reserve(static_cast<size_t>(proto.blocks_size()));
    for (const v1::SnapshotBlock& b : proto.blocks()) {
      std::optional<BlockState> state = ParseBlockState(b.state());
      if (!state.has_value()) {
        segment.blocks.clear();
        segment.blocks_unavailable =
            "a block's state is none of active_allocated, active_pending_free and inactive";
        break;
      }
      BlockSnapshot& block = segment.blocks.emplace_back();
      block.address = b.address();
      block.size = b.size();
      block.requested_size = b.requested_size();
      block.state = *state;
    }
  }
  return out;
}

}  // namespace gpumux
