#pragma once

// The gRPC channel every gpumux client (library and CLI) uses to reach gpumuxd.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpumux/channel_security.h"
#include "grpcpp/channel.h"

namespace gpumux {

// True for a Unix-socket target ("unix:///p", "unix:/p", "/p"): the daemon's
// own machine, where memory is mapped; false for "host:port" (TCP).
bool IsUnixAddress(absl::string_view address);

// `security` with each empty field taken from its environment variable
// (GPUMUX_TLS_CA, GPUMUX_TLS_CERT, GPUMUX_TLS_KEY, GPUMUX_AUTH_TOKEN_FILE,
// GPUMUX_TLS_SERVER_NAME) where that is set and non-empty.
ChannelSecurity ResolveChannelSecurity(const ChannelSecurity& security);

// A channel to `address` ("unix:///path", "/path" or "host:port", see
// ToGrpcTarget) without gRPC's limits on message sizes (4 MiB received by
// default), which 64 MiB inline copies and snapshots of busy devices outgrow.
// A Unix address is plaintext and ignores `security`. A TCP address, with
// `security` resolved (ResolveChannelSecurity): TLS verified against the CA
// file when one is given (with the client certificate and the server name
// override when given), the token file's token sent with every call as
// `authorization: Bearer <token>`; plaintext without a CA. INVALID_ARGUMENT,
// naming the file: a file that cannot be read or holds no PEM block of its
// kind, a bad token (ReadAuthTokenFile); a certificate without its key or
// the other way round; a certificate, key, token or server name without a
// CA (they mean TLS, and a token must not cross the network in clear).
// Connects lazily: an unreachable daemon shows as UNAVAILABLE on the first
// call (as does a failed TLS handshake).
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateDaemonChannel(absl::string_view address,
                                                                   const ChannelSecurity& security);

// Starts connecting `channel` and waits until the attempt settles: OK once it
// is connected or has failed (a call then fails at once with gRPC's reason);
// DEADLINE_EXCEEDED "gpumuxd at <address> did not accept a connection within
// <timeout>" when it is still connecting after `timeout` (a daemon that is
// stopped, wedged, or behind a black-holed TCP port). Bounds the wait of a
// streaming call, which cannot carry a deadline of its own.
absl::Status AwaitConnectAttempt(grpc::Channel& channel, absl::Duration timeout,
                                 absl::string_view address);

}  // namespace gpumux
