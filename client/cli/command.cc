#include "client/cli/command.h"

#include "absl/strings/match.h"

namespace gpumux {

int ReportError(const CommandContext& context, const absl::Status& status) {
  if (absl::IsUnavailable(status)) {
    *context.err << "gpumux: " << status.message() << "\n";
  } else {
    *context.err << "gpumux: " << absl::StatusCodeToString(status.code()) << ": "
                 << status.message() << "\n";
  }
  return kExitFailure;
}

int UsageError(const CommandContext& context, absl::string_view message, absl::string_view usage) {
  *context.err << "gpumux: " << message << "\n\n"
               << (absl::StartsWith(usage, "usage:") ? "" : "usage: ") << usage;
  return kExitUsage;
}

}  // namespace gpumux
