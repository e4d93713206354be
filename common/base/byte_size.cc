#include "common/base/byte_size.h"
#include "absl/strings/string_view.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

struct Unit {
  absl::string_view name;
  double factor;
};

constexpr Unit kUnits[] = {
    {"", 1},
    {"b", 1},
    {"kib", 1024.0},
    {"mib", 1024.0 * 1024},
    {"gib", 1024.0 * 1024 * 1024},
    {"tib", 1024.0 * 1024 * 1024 * 1024},
    {"kb", 1e3},
    {"mb", 1e6},
    {"gb", 1e9},
    {"tb", 1e12},
};

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() && (absl::ascii_isdigit(s[digits]) || s[digits] == '.')) ++digits;
  absl::string_view number = s.substr(0, digits);
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(digits)));
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size '", text,
        "': expected a number with an optional unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"));
  };
  if (number.empty()) return invalid();
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    uint64_t whole = 0;
    if (number.find('.') == absl::string_view::npos && absl::SimpleAtoi(number, &whole)) {
      // Integers stay exact; only overflow needs care.
      uint64_t factor = static_cast<uint64_t>(u.factor);
      if (whole != 0 && factor > UINT64_MAX / whole) {
        return absl::InvalidArgumentError(
            absl::StrCat("size '", text, "' does not fit in 64 bits"));
      }
      return whole * factor;
    }
    double value = 0;
    if (!absl::SimpleAtod(number, &value) || !std::isfinite(value) || value < 0) return invalid();
    double bytes = std::round(value * u.factor);
    if (bytes >= 18446744073709551616.0) {
      return absl::InvalidArgumentError(absl::StrCat("size '", text, "' does not fit in 64 bits"));
    }
    return static_cast<uint64_t>(bytes);
  }
  return invalid();
}

std::string FormatTorchSize(uint64_t bytes) {
  char buf[64];
  if (bytes <= 1024) {
    std::snprintf(buf, sizeof(buf), "%llu bytes", static_cast<unsigned long long>(bytes));
  } else if (bytes <= 1048576) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", bytes / 1024.0);
  } else if (bytes <= 1073741824) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", bytes / 1048576.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  }
  return buf;
}

}  // namespace gpumux
