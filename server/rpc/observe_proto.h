#pragma once

// Conversions from the core's session overviews to gpumux.v1.Observe
// messages, for the Observe service (memory figures: memory_proto.h).

#include "gpumux/v1/observe.pb.h"
#include "server/core/session_overview.h"

namespace gpumux {

void ToProto(const SessionOverview& overview, v1::SessionInfo* out);

}  // namespace gpumux
