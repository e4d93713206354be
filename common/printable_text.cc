#include "common/printable_text.h"

#include <cstddef>

#include "absl/strings/str_format.h"

namespace gpumux {

absl::Status CheckPrintable(absl::string_view what, absl::string_view text, absl::string_view why) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const bool c1 = byte == 0xc2 && i + 1 < text.size() &&
                    static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9f;
    if (byte < 0x20 || byte == 0x7f || c1) {
      const unsigned code = c1 ? static_cast<unsigned char>(text[i + 1]) : byte;
      return absl::InvalidArgumentError(
          absl::StrFormat("%s holds control character U+%04X at byte %d; %s", what, code, i, why));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpumux
