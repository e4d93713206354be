#pragma once

// Text that operators read in tables and the daemon's log (client names,
// tenants, labels, an operator's kill reason) must not carry control
// characters: an ANSI escape would repaint a terminal, a newline would forge
// a log line.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// OK when `text` holds no C0 control, DEL or C1 control (U+0080 to U+009F
// as UTF-8); else INVALID_ARGUMENT "<what> holds control character U+XXXX
// at byte N; <why>".
absl::Status CheckPrintable(absl::string_view what, absl::string_view text, absl::string_view why);

}  // namespace gpumux
