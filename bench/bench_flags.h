#pragma once

// The benchmarks' command lines, read by the CLI's flag parser
// (client/cli/flag_parser.h): each benchmark lists its flags and where their
// values go; every flag takes a value ("--name value" or "--name=value").

#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cli/flag_parser.h"
#include "common/base/status_macros.h"

namespace gpumux::bench {

struct BenchFlag {
  const char* name;  // without the leading "--"
  std::variant<std::string*, int*, uint64_t*> value;
  // The integers accepted; a value outside is INVALID_ARGUMENT.
  int64_t min = 1;
  int64_t max = std::numeric_limits<int>::max();
};

// Stores each given flag's value through `flags`; an absent flag leaves its
// default. INVALID_ARGUMENT for an unknown flag, a missing value, an integer
// out of [min, max], or an argument that is not a flag.
inline absl::Status ParseBenchFlags(int argc, char** argv, const std::vector<BenchFlag>& flags) {
  std::vector<FlagSpec> specs;
  for (const BenchFlag& flag : flags) specs.push_back({flag.name, /*takes_value=*/true});
  GPUMUX_ASSIGN_OR_RETURN(ParsedArgs args,
                          ParseFlags(std::vector<std::string>(argv + 1, argv + argc), specs));
  if (!args.positional.empty())
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument ", args.positional[0]));
  for (const BenchFlag& flag : flags) {
    if (std::string* const* text = std::get_if<std::string*>(&flag.value)) {
      **text = args.Get(flag.name).value_or(**text);
    } else if (int* const* number = std::get_if<int*>(&flag.value)) {
      GPUMUX_ASSIGN_OR_RETURN(int64_t value,
                              IntFlag(args, flag.name, **number, flag.min, flag.max));
      **number = static_cast<int>(value);
    } else {
      uint64_t* size = std::get<uint64_t*>(flag.value);
      GPUMUX_ASSIGN_OR_RETURN(
          int64_t value, IntFlag(args, flag.name, static_cast<int64_t>(*size), flag.min, flag.max));
      *size = static_cast<uint64_t>(value);
    }
  }
  return absl::OkStatus();
}

}  // namespace gpumux::bench
