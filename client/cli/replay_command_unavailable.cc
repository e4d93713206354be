// replay in a build without bench/'s gpumux::replay library
// (GPUMUX_BUILD_BENCH=OFF): says so instead of replaying.

#include "absl/status/status.h"
#include "client/cli/commands.h"

namespace gpumux {

int RunReplay(const CommandContext& context, const std::vector<std::string>& /*args*/) {
  return ReportError(context,
                     absl::UnimplementedError("replay is not part of this build (configure with "
                                              "GPUMUX_BUILD_BENCH=ON)"));
}

}  // namespace gpumux
