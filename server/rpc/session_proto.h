#pragma once

// Conversions between gpumux.v1.Session messages and the core's session
// types, for the Session service.

#include "gpumux/v1/session.pb.h"
#include "server/core/session_registry.h"

namespace gpumux {

// Who opens the session; the registry fills in the id, tenant default and time.
SessionInfo FromProto(const v1::OpenSessionRequest& open);

// The id, secret and tenant of `opened` (the service adds backend and version).
void ToProto(const OpenedSession& opened, v1::SessionOpened* out);

// The notice that `segment` of `device` is being released.
v1::SessionServerMessage SegmentReleasedMessage(DeviceIndex device, SegmentId segment);

}  // namespace gpumux
