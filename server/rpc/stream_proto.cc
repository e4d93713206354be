#include "server/rpc/stream_proto.h"

namespace gpumux {

DeviceIndex DeviceOf(const v1::StreamRef& ref) { return DeviceIndex(ref.device()); }

StreamId StreamOf(const v1::StreamRef& ref) { return StreamId(ref.stream()); }

void ToProto(const StreamPriorityRange& range, v1::GetPriorityRangeResponse* out) {
  out->set_least(range.least);
  out->set_greatest(range.greatest);
}

void ToProto(const StreamManager::CreatedStream& created, DeviceIndex device,
             v1::CreateStreamResponse* out) {
  out->set_stream(created.id.value());
  out->set_device(device.value());
  out->set_priority(created.priority);
}

}  // namespace gpumux
