#pragma once

// Reads the "gpumux-session: <id>:<secret>" metadata of a call and checks it
// against the session registry.

#include "absl/status/statusor.h"
#include "gpumux/common/ids.h"
#include "grpcpp/server_context.h"
#include "server/core/session_registry.h"

namespace gpumux {

inline constexpr char kSessionMetadataKey[] = "gpumux-session";
// The client's call an RPC serves, which profiling clients send
// (client/host_profiler.h) so that the daemon's records name it.
inline constexpr char kCallMetadataKey[] = "gpumux-call";

// UNAUTHENTICATED when the entry is missing or does not name an open session.
absl::StatusOr<SessionId> AuthenticateCall(const grpc::CallbackServerContext& context,
                                           const SessionRegistry& sessions);

// The "gpumux-call" metadata's call id; 0 when absent or not a number.
uint64_t CallIdOf(const grpc::CallbackServerContext& context);

}  // namespace gpumux
