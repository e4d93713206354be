#include "client/grpc_status.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpumux {

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view address) {
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return UnreachableError(address, status.error_message());
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::Status UnreachableError(absl::string_view address, absl::string_view detail) {
  // Something listens but hung up in the TLS handshake (a TLS listener also
  // hangs up on a plaintext client): say what to check.
  const bool handshake_failed =
      absl::StrContains(detail, "andshake") || absl::StrContains(detail, "Socket closed") ||
      absl::StrContains(detail, "SSL_ERROR") || absl::StrContains(detail, "peer certificate");
  // Nothing listens there: say what to do about it.
  const bool nobody_there = !handshake_failed && (absl::StrContains(detail, "failed to connect") ||
                                                  absl::StrContains(detail, "No such file") ||
                                                  absl::StrContains(detail, "Connection refused"));
  return absl::UnavailableError(absl::StrCat(
      "cannot reach gpumuxd at ", address, ": ", detail,
      nobody_there
          ? "; is gpumuxd running? Start it (gpumuxd, or systemctl start gpumuxd) or point "
            "GPUMUX_ADDRESS (the CLI: --address) at its socket"
          : "",
      handshake_failed
          ? "; if its TCP listener speaks TLS: give the CA of its certificate (--tls-ca, "
            "GPUMUX_TLS_CA), check that the certificate names this address (else "
            "--tls-server-name), and for a daemon with --tls-client-ca give this client's "
            "certificate (--tls-cert, --tls-key)"
          : ""));
}

}  // namespace gpumux
