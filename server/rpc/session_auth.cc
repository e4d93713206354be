#include "server/rpc/session_auth.h"

#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpumux {

absl::StatusOr<SessionId> AuthenticateCall(const grpc::CallbackServerContext& context,
                                           const SessionRegistry& sessions) {
  const auto& metadata = context.client_metadata();
  auto [first, last] = metadata.equal_range(kSessionMetadataKey);
  if (first == last) {
    return absl::UnauthenticatedError(
        "missing gpumux-session metadata: open a session with Session.Open and send "
        "\"<id>:<secret>\"");
  }
  if (std::next(first) != last) {
    return absl::UnauthenticatedError(
        absl::StrCat(std::distance(first, last),
                     " gpumux-session metadata values: send exactly one \"<id>:<secret>\""));
  }
  return sessions.Authenticate(absl::string_view(first->second.data(), first->second.size()));
}

uint64_t CallIdOf(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kCallMetadataKey);
  uint64_t call = 0;
  if (it == metadata.end() ||
      !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &call)) {
    return 0;
  }
  return call;
}

}  // namespace gpumux
