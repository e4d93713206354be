#pragma once

// The gRPC channel every gpumux client (library and CLI) uses to reach gpumuxd.

#include <memory>

#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"

namespace gpumux {

// An insecure channel to `address` ("unix:///path", "/path" or "host:port",
// see ToGrpcTarget) without gRPC's 4 MiB limit on received messages, which
// snapshots of busy devices outgrow. Connects lazily: an unreachable daemon
// shows as UNAVAILABLE on the first call.
std::shared_ptr<grpc::Channel> CreateDaemonChannel(absl::string_view address);

}  // namespace gpumux
