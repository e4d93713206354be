#include "server/rpc/event_proto.h"

namespace gpumux {

EventFlags FromProto(const v1::CreateEventRequest& request) {
  return EventFlags{request.enable_timing(), request.blocking(), request.interprocess()};
}

void ToProto(const EventView& event, v1::CreateEventResponse* out) {
  out->set_event(event.id.value());
  out->set_device(event.device.value());
}

}  // namespace gpumux
