#pragma once

// The admin socket: where gpumuxd serves gpumux.v1.Admin, "<socket>.admin"
// next to its gRPC socket (same owner, group and mode). gRPC does not tell a
// service who its Unix-socket peer is (its auth context is empty for
// insecure and local credentials), so the daemon accepts these connections
// itself, reads SO_PEERCRED, and hands each to a gRPC server by descriptor:
// operators' (uid 0 or the daemon's uid) to the one serving Admin, anyone
// else's to one that answers PERMISSION_DENIED.

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpumux {

inline constexpr absl::string_view kAdminSocketSuffix = ".admin";

inline std::string AdminSocketPath(absl::string_view grpc_socket_path) {
  return absl::StrCat(grpc_socket_path, kAdminSocketSuffix);
}

}  // namespace gpumux
