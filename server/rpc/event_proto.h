#pragma once

// Conversions between gpumux.v1.Event messages and StreamManager's event
// types, for the Event service.

#include "gpumux/v1/stream.pb.h"
#include "server/core/stream_manager.h"

namespace gpumux {

EventFlags FromProto(const v1::CreateEventRequest& request);

// An event made by Create or OpenIpcHandle.
void ToProto(const EventView& event, v1::CreateEventResponse* out);

}  // namespace gpumux
