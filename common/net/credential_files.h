#pragma once

// Reading the files that hold TCP credentials, for gpumuxd and its clients
// alike: PEM certificates and keys (handed to gRPC as they are) and the
// bearer token of the TCP listener (`authorization: Bearer <token>`).

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// Tokens longer than this are refused: they would crowd gRPC's 8 KiB of
// metadata per call.
inline constexpr size_t kMaxAuthTokenBytes = 4096;
// Certificate chains and keys larger than this are not PEM files.
inline constexpr size_t kMaxCredentialFileBytes = size_t{1} << 20;

// The whole of the file at `path`. INVALID_ARGUMENT "<what> '<path>': <reason>"
// when it cannot be opened or read, is not a regular file, or holds more than
// kMaxCredentialFileBytes. `what` names the flag or variable that gave the
// path, e.g. "--tls-cert".
absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, absl::string_view what);

// The token in the file at `path`: its text without a trailing newline
// ("\n" or "\r\n"). INVALID_ARGUMENT, naming `what` and the path, when the
// file cannot be read (as ReadCredentialFile), or the token is empty, longer
// than kMaxAuthTokenBytes, or holds anything but printable ASCII without
// spaces (what an HTTP header value carries unquoted). The token itself is
// never part of a message.
absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path, absl::string_view what);

// True when `text` holds a PEM block of `label`, e.g. "CERTIFICATE" or
// "PRIVATE KEY" (which also matches "RSA PRIVATE KEY", "EC PRIVATE KEY").
// A cheap check that a file is what it should be; it does not parse it.
bool HoldsPemBlock(absl::string_view text, absl::string_view label);

}  // namespace gpumux
