#pragma once

// What every `gpumux` subcommand shares: the daemon's address, where to
// print, the exit codes and how errors are reported.

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gpumux/channel_security.h"

namespace gpumux {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the daemon or the system said no
inline constexpr int kExitUsage = 2;    // bad command line

struct CommandContext {
  // --address as given, else DefaultAddress().
  std::string address;
  bool address_given = false;
  // --tls-ca, --tls-cert, --tls-key, --auth-token-file, --tls-server-name
  // (empty: their GPUMUX_* variables): how a TCP address is secured. Every
  // Observer and Client of a command takes it.
  ChannelSecurity security;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

// Prints "gpumux: <message>" for UNAVAILABLE (whose message already reads
// "cannot reach gpumuxd at <address>: <detail>") and "gpumux: <CODE>:
// <message>" otherwise to context.err; returns kExitFailure.
int ReportError(const CommandContext& context, const absl::Status& status);

// Prints "gpumux: <message>" and `usage` to context.err; returns kExitUsage.
int UsageError(const CommandContext& context, absl::string_view message, absl::string_view usage);

}  // namespace gpumux
