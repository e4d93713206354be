// kill-session: an operator ends a session as if its client had died
// (gpumux.v1.Admin.KillSession, on the admin socket, root or gpumuxd's user).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "gpumux/admin.h"

namespace gpumux {

int RunKillSession(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {{"reason", true}});
  absl::Status status = parsed.status();
  uint64_t id = 0;
  if (status.ok() && parsed->positional.size() != 1) {
    status = absl::InvalidArgumentError(
        parsed->positional.empty() ? "kill-session wants the session's ID (gpumux sessions)"
                                   : absl::StrCat("unexpected argument ", parsed->positional[1]));
  }
  if (status.ok() && (absl::StartsWith(parsed->positional[0], "-") ||
                      !absl::SimpleAtoi(parsed->positional[0], &id) || id == 0)) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "ID wants a session id, a positive integer, got '", parsed->positional[0], "'"));
  }
  if (!status.ok()) return UsageError(context, status.message(), kKillSessionUsage);
  const std::string reason = parsed->Get("reason").value_or("");
  status = Admin(context.address).KillSession(SessionId(id), reason);
  if (!status.ok()) return ReportError(context, status);
  *context.out << "session " << id << " killed"
               << (reason.empty() ? std::string() : absl::StrCat(": ", reason))
               << "; everything it held is reclaimed\n";
  return kExitOk;
}

}  // namespace gpumux
