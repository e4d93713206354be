#pragma once

// Process-wide logging setup over spdlog. gpumux code logs through spdlog's
// default logger (spdlog::info(...)) and includes this header, which also
// teaches fmt to print Debian's absl::string_view (a class of its own there).

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/fmt/fmt.h"

namespace gpumux {

// Makes the default logger write to standard error as `program` (standard
// output stays for a program's results).
void InitLogging(absl::string_view program);

// Sets the default logger's level from "trace", "debug", "info", "warn",
// "error", "critical" or "off". INVALID_ARGUMENT for any other name.
absl::Status SetLogLevel(absl::string_view level);

}  // namespace gpumux

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};
