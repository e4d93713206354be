#include "server/rpc/session_auth.h"

namespace gpumux {

absl::StatusOr<SessionId> AuthenticateCall(const grpc::CallbackServerContext& context,
                                           const SessionRegistry& sessions) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kSessionMetadataKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "missing gpumux-session metadata: open a session with Session.Open and send \"<id>:<secret>\"");
  }
  return sessions.Authenticate(absl::string_view(it->second.data(), it->second.size()));
}

}  // namespace gpumux
