#pragma once

// The CLI's hand-written flag parser: each subcommand declares its flags, so
// absl's process-global flags are not a fit. Accepts "--name value",
// "--name=value", boolean "--name", and "--" to end the flags.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

struct FlagSpec {
  std::string name;  // without the leading "--"
  bool takes_value = false;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  // Flag name → value ("" for booleans); a repeated flag keeps its last value.
  std::map<std::string, std::string> flags;

  bool Has(absl::string_view name) const { return flags.count(std::string(name)) > 0; }
  std::optional<std::string> Get(absl::string_view name) const;
};

// INVALID_ARGUMENT for an unknown flag, a missing value, or a value given to
// a boolean flag. A lone "-" is positional.
absl::StatusOr<ParsedArgs> ParseFlags(const std::vector<std::string>& args,
                                      const std::vector<FlagSpec>& specs);

// Takes "--name value" / "--name=value" out of `args` wherever it appears
// before "--" (for global flags given after the subcommand). nullopt when
// absent; INVALID_ARGUMENT when the value is missing.
absl::StatusOr<std::optional<std::string>> ExtractFlag(std::vector<std::string>& args,
                                                       absl::string_view name);

// The flag's value as an integer in [min, max]; `fallback` when the flag is
// absent. INVALID_ARGUMENT "--<name> wants an integer in [min, max], got '<v>'".
absl::StatusOr<int64_t> IntFlag(const ParsedArgs& args, absl::string_view name, int64_t fallback,
                                int64_t min, int64_t max);
// The same for unsigned 64-bit values (session ids).
absl::StatusOr<uint64_t> UintFlag(const ParsedArgs& args, absl::string_view name,
                                  uint64_t fallback);

}  // namespace gpumux
