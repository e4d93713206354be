#pragma once

// HOST:PORT as gpumuxd's listen flags take it (--listen, --metrics-listen):
// a host, bracketed when it is IPv6 ("[::1]:9408"), and a decimal port in
// 0-65535, where 0 picks a free port.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;
};

// INVALID_ARGUMENT "<flag> '<address>': ..." saying what is wrong: no port,
// a port that is not a number in 0-65535 (gRPC would pick a random port for
// one it cannot parse), or an IPv6 host without brackets.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view flag, absl::string_view address);

}  // namespace gpumux
