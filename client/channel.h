#pragma once

// The gRPC channel every gpumux client (library and CLI) uses to reach gpumuxd.

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace gpumux {

// An insecure channel to `address` ("unix:///path", "/path" or "host:port",
// see ToGrpcTarget) without gRPC's limits on message sizes (4 MiB received by
// default), which 64 MiB inline copies and snapshots of busy devices outgrow.
// Connects lazily: an unreachable daemon shows as UNAVAILABLE on the first
// call.
std::shared_ptr<grpc::Channel> CreateDaemonChannel(absl::string_view address);

// Starts connecting `channel` and waits until the attempt settles: OK once it
// is connected or has failed (a call then fails at once with gRPC's reason);
// DEADLINE_EXCEEDED "gpumuxd at <address> did not accept a connection within
// <timeout>" when it is still connecting after `timeout` (a daemon that is
// stopped, wedged, or behind a black-holed TCP port). Bounds the wait of a
// streaming call, which cannot carry a deadline of its own.
absl::Status AwaitConnectAttempt(grpc::Channel& channel, absl::Duration timeout,
                                 absl::string_view address);

}  // namespace gpumux
