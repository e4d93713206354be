#pragma once

// Text that operators read in tables and the daemon's log (client names,
// tenants, labels, an operator's kill reason) must not carry control
// characters: an ANSI escape would repaint a terminal, a newline would forge
// a log line, and a bidirectional override (Trojan Source, CVE-2021-42574)
// would show a name other than the one it is.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// OK when `text` holds no C0 control, DEL, C1 control (U+0080 to U+009F as
// UTF-8) or Unicode bidirectional formatting character (U+061C, U+200E,
// U+200F, U+202A to U+202E, U+2066 to U+2069); else INVALID_ARGUMENT
// "<what> holds control character U+XXXX at byte N; <why>".
absl::Status CheckPrintable(absl::string_view what, absl::string_view text, absl::string_view why);

}  // namespace gpumux
