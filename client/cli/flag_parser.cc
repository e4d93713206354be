#include "client/cli/flag_parser.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpumux {

std::optional<std::string> ParsedArgs::Get(absl::string_view name) const {
  auto it = flags.find(std::string(name));
  if (it == flags.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<ParsedArgs> ParseFlags(const std::vector<std::string>& args,
                                      const std::vector<FlagSpec>& specs) {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      parsed.positional.insert(parsed.positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (!absl::StartsWith(arg, "-") || arg == "-") {
      parsed.positional.push_back(arg);
      continue;
    }
    absl::string_view body(arg);
    body.remove_prefix(absl::StartsWith(body, "--") ? 2 : 1);
    std::optional<std::string> inline_value;
    if (size_t eq = body.find('='); eq != absl::string_view::npos) {
      inline_value = std::string(body.substr(eq + 1));
      body = body.substr(0, eq);
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& candidate : specs) {
      if (candidate.name == body) spec = &candidate;
    }
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    if (!spec->takes_value) {
      if (inline_value.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("--", spec->name, " takes no value"));
      }
      parsed.flags[spec->name] = "";
    } else if (inline_value.has_value()) {
      parsed.flags[spec->name] = *inline_value;
    } else if (i + 1 < args.size()) {
      parsed.flags[spec->name] = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", spec->name, " needs a value"));
    }
  }
  return parsed;
}

absl::StatusOr<std::optional<std::string>> ExtractFlag(std::vector<std::string>& args,
                                                       absl::string_view name) {
  const std::string flag = absl::StrCat("--", name);
  const std::string prefix = absl::StrCat(flag, "=");
  std::optional<std::string> value;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      rest.insert(rest.end(), args.begin() + i, args.end());
      break;
    }
    if (args[i] == flag) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      }
      value = args[++i];
    } else if (absl::StartsWith(args[i], prefix)) {
      value = args[i].substr(prefix.size());
    } else {
      rest.push_back(args[i]);
    }
  }
  args.swap(rest);
  return value;
}

absl::StatusOr<int64_t> IntFlag(const ParsedArgs& args, absl::string_view name, int64_t fallback,
                                int64_t min, int64_t max) {
  std::optional<std::string> text = args.Get(name);
  if (!text.has_value()) return fallback;
  int64_t value;
  if (!absl::SimpleAtoi(*text, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants an integer in [", min, ", ", max, "], got '", *text, "'"));
  }
  return value;
}

absl::StatusOr<uint64_t> UintFlag(const ParsedArgs& args, absl::string_view name,
                                  uint64_t fallback) {
  std::optional<std::string> text = args.Get(name);
  if (!text.has_value()) return fallback;
  uint64_t value;
  if (absl::StartsWith(*text, "-") || !absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants a non-negative integer, got '", *text, "'"));
  }
  return value;
}

}  // namespace gpumux
