#include "common/base/logging.h"
#include "absl/strings/string_view.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace gpumux {

void InitLogging(absl::string_view program) {
  spdlog::set_default_logger(spdlog::stderr_color_mt(std::string(program)));
}

absl::Status SetLogLevel(absl::string_view level) {
  static constexpr absl::string_view kNames[] = {"trace", "debug",    "info", "warn",
                                                 "error", "critical", "off"};
  for (absl::string_view name : kNames) {
    if (level == name) {
      spdlog::set_level(spdlog::level::from_str(std::string(name)));
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", level, "'; use trace, debug, info, warn, error, critical or off"));
}

}  // namespace gpumux
