#pragma once

// Conversions between gpumux.v1.Stream messages and StreamManager's types,
// for the Stream service and the Event service (which names streams too).

#include "gpumux/v1/stream.pb.h"
#include "server/core/stream_manager.h"

namespace gpumux {

// The device and stream a StreamRef names.
DeviceIndex DeviceOf(const v1::StreamRef& ref);
StreamId StreamOf(const v1::StreamRef& ref);

void ToProto(const StreamPriorityRange& range, v1::GetPriorityRangeResponse* out);
void ToProto(const StreamManager::CreatedStream& created, DeviceIndex device,
             v1::CreateStreamResponse* out);

}  // namespace gpumux
