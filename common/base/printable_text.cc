#include "common/base/printable_text.h"

#include <cstddef>
#include <optional>

#include "absl/strings/str_format.h"

namespace gpumux {
namespace {

// The code point of the control character at text[i], if one starts there.
std::optional<unsigned> ControlAt(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) {
    return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u;
  };
  const unsigned b0 = byte(i);
  if (b0 < 0x20 || b0 == 0x7f) return b0;
  const unsigned b1 = byte(i + 1);
  if (b0 == 0xc2 && b1 >= 0x80 && b1 <= 0x9f) return b1;  // C1
  if (b0 == 0xd8 && b1 == 0x9c) return 0x061c;            // Arabic letter mark
  const unsigned b2 = byte(i + 2);
  if (b0 != 0xe2 || (b1 & 0xc0) != 0x80 || (b2 & 0xc0) != 0x80) return std::nullopt;
  const unsigned code = 0x2000 | ((b1 & 0x3f) << 6) | (b2 & 0x3f);  // U+2000 to U+2FFF
  const bool bidi = code == 0x200e || code == 0x200f || (code >= 0x202a && code <= 0x202e) ||
                    (code >= 0x2066 && code <= 0x2069);
  if (bidi) return code;
  return std::nullopt;
}

}  // namespace

absl::Status CheckPrintable(absl::string_view what, absl::string_view text, absl::string_view why) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (const std::optional<unsigned> code = ControlAt(text, i); code.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s holds control character U+%04X at byte %d; %s", what, *code, i, why));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpumux
