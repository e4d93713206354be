#pragma once

// POSIX shared-memory objects as the host backend uses them: created once,
// exclusively, zero-filled and unmapped in the daemon; mapped by clients by
// name; unlinked on release. Also the one place where errno from these calls
// becomes an absl::Status. Stateless free functions, safe from any thread.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// Translates `error_number` (an errno value) into a Status whose code follows
// absl::ErrnoToStatusCode (ENOSPC/ENOMEM → RESOURCE_EXHAUSTED, EEXIST →
// ALREADY_EXISTS, EACCES → PERMISSION_DENIED, …) and whose message is
// "<what>: <strerror text>".
absl::Status ErrnoStatus(int error_number, absl::string_view what);

// Creates the object `name` (shm_open O_CREAT|O_EXCL|O_RDWR, mode 0660) and
// sizes it to `size` bytes with ftruncate, so it reads as zeros and commits no
// pages until touched. Leaves no object behind on failure. ALREADY_EXISTS when
// the name is taken; other errno-derived codes otherwise.
absl::Status CreateShmObject(const std::string& name, uint64_t size);

// shm_unlink(name): processes that mapped it keep their mappings, nobody can
// open it again. NOT_FOUND when no such object exists.
absl::Status UnlinkShmObject(const std::string& name);

}  // namespace gpumux
