#include "server/rpc/session_proto.h"

namespace gpumux {

SessionInfo FromProto(const v1::OpenSessionRequest& open) {
  SessionInfo info;
  info.client_name = open.client_name();
  info.pid = open.pid();
  info.tenant = open.tenant();
  info.labels.insert(open.labels().begin(), open.labels().end());
  return info;
}

void ToProto(const OpenedSession& opened, v1::SessionOpened* out) {
  out->set_session_id(opened.info.id.value());
  out->set_secret(opened.secret);
  out->set_tenant(opened.info.tenant);
}

v1::SessionServerMessage SegmentReleasedMessage(DeviceIndex device, SegmentId segment) {
  v1::SessionServerMessage message;
  message.mutable_segment_released()->set_device(device.value());
  message.mutable_segment_released()->set_segment_id(segment.value());
  return message;
}

}  // namespace gpumux
