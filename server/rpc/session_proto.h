#pragma once

// Conversions between gpumux.v1.Session messages and the core's session
// types, for the Session service.

#include <cstdint>
#include <vector>

#include "allocator/caching_allocator.h"
#include "gpumux/v1/session.pb.h"
#include "server/core/session_registry.h"

namespace gpumux {

// Who opens the session; the registry fills in the id, tenant default and time.
SessionRecord FromProto(const v1::OpenSessionRequest& open);

// The id, secret and tenant of `opened` (the service adds backend and version).
void ToProto(const OpenedSession& opened, v1::SessionOpened* out);

// The notice that `segment` of `device` is being released.
// `size` 0: the whole segment; else its pages [offset, offset + size).
v1::SessionServerMessage SegmentReleasedMessage(DeviceIndex device, SegmentId segment,
                                                uint64_t offset = 0, uint64_t size = 0);

// The daemon's questions to a client (ClientQueries).
v1::SessionServerMessage ReleaseCachedMessage(uint64_t request, DeviceIndex device);
v1::SessionServerMessage BlocksRequestMessage(uint64_t request);
// `gpumux profile`'s window on the session (DeviceProfiler).
v1::SessionServerMessage StartProfilingMessage(uint64_t window, uint64_t capacity);
v1::SessionServerMessage StopProfilingMessage(uint64_t window);

// The segments of a client's lease_blocks answer, as far as the daemon
// reads them: device, address and blocks. A block state that is not one of
// PyTorch's three marks its segment `blocks_unavailable`.
std::vector<SegmentSnapshot> FromProto(const v1::LeaseBlocks& answer);

}  // namespace gpumux
