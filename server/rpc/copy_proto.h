#pragma once

// Conversions between gpumux.v1.Copy messages and DeviceWork's types, for
// the Copy service and the Random service's fills.

#include <cstdint>

#include "gpumux/v1/copy.pb.h"
#include "server/core/device_work.h"
#include "server/core/staging_buffers.h"

namespace gpumux {

WorkOptions FromProto(const v1::CopyOptions& options);

// `size` bytes at `range`.
RangeUse FromProto(const v1::DeviceRange& range, uint64_t size);

void ToProto(const StagingBufferInfo& info, v1::StagingBuffer* out);

// The completion event of `done`, if any, into a reply's `event` and
// `event_ipc_handle` fields.
template <typename Response>
void SetCompletionEvent(const WorkDone& done, Response* response) {
  if (!done.event.has_value()) return;
  response->set_event(done.event->id.value());
  response->set_event_ipc_handle(done.event->ipc_handle);
}

}  // namespace gpumux
