#pragma once

// The one place where the client turns gRPC statuses into absl::Status
// (STYLE: foreign errors are translated once, at the edge).

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace gpumux {

// Same code, the daemon's message. gRPC's codes and Abseil's share their
// numeric values. UNAVAILABLE is what gRPC reports when the daemon cannot be
// reached (no socket, connection refused or reset, daemon gone), so it becomes
// UNAVAILABLE "cannot reach gpumuxd at <address>: <gRPC's detail>" (plus, when
// nothing listens there, how to start gpumuxd or point GPUMUX_ADDRESS at it); an
// UNAVAILABLE the daemon itself returns reads the same way, its message as the
// detail. `address` is the address as the user gave it.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view address);

// The UNAVAILABLE status above, for failures noticed without a gRPC status
// (e.g. the session stream ended earlier).
absl::Status UnreachableError(absl::string_view address, absl::string_view detail);

}  // namespace gpumux
