#pragma once

// The listening Unix sockets beside the gRPC socket (the admin and memory
// sockets): bound, given to their group, mode 0660, listening.

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux {

// A non-blocking, close-on-exec Unix socket of `type` (SOCK_STREAM or
// SOCK_SEQPACKET) listening at `path` with `backlog`, owned by `group` when
// one is given, mode 0660. `what` names it in errors ("admin socket").
// INVALID_ARGUMENT for an empty or too long path, UNAVAILABLE when it cannot
// bind or listen, PERMISSION_DENIED when it cannot take the group or mode;
// the path is removed again after any failure past the bind.
absl::StatusOr<UniqueFd> ListenOnUnixSocket(absl::string_view what, const std::string& path,
                                            int type, std::optional<gid_t> group, int backlog);

}  // namespace gpumux
