#pragma once

// Reads the "gpumux-session: <id>:<secret>" metadata of a call and checks it
// against the session registry.

#include "absl/status/statusor.h"
#include "common/ids.h"
#include "grpcpp/server_context.h"
#include "server/core/session_registry.h"

namespace gpumux {

inline constexpr char kSessionMetadataKey[] = "gpumux-session";

// UNAUTHENTICATED when the entry is missing or does not name an open session.
absl::StatusOr<SessionId> AuthenticateCall(const grpc::CallbackServerContext& context,
                                           const SessionRegistry& sessions);

}  // namespace gpumux
