#pragma once

// The C ABI's per-thread last error (gpumux_last_error): the text and code
// of the calling thread's last failed call, cleared as each call begins.
// Thread-local, so no locking.

#include "absl/status/status.h"

namespace gpumux::c_abi {

// Clears the calling thread's last error (every gpumux_* call begins so).
void ClearLastError();
// Records `status` (not OK) as the calling thread's last error: its message
// and code.
void SetLastError(const absl::Status& status);
// The text ("" when none); valid until the thread's next Clear or Set.
const char* LastErrorText();
int LastErrorCode();

}  // namespace gpumux::c_abi
