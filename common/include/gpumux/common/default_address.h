#pragma once

// Where gpumuxd listens by default (DESIGN §2): /run/gpumux/gpumux.sock for
// root, $XDG_RUNTIME_DIR/gpumux.sock for other users; $GPUMUX_ADDRESS, when
// set, overrides both on the client side.

#include <string>

#include "absl/strings/string_view.h"

namespace gpumux {

// The daemon's default Unix socket path for the current user.
std::string DefaultSocketPath();

// The client's default gRPC target: $GPUMUX_ADDRESS or "unix://" + DefaultSocketPath().
std::string DefaultAddress();

// Turns a user-given address into a gRPC target: "unix:///p" and "host:port"
// pass through, a bare absolute path "/p" becomes "unix:///p".
std::string ToGrpcTarget(absl::string_view address);

}  // namespace gpumux
