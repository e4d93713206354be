#pragma once

// The TCP listener's security, from gpumuxd's flags: TLS from PEM files
// (optionally requiring a client certificate signed by a CA: mutual TLS) and
// the bearer token every call must carry (BearerTokenProcessor). Files are
// read and checked here, at start, so that a bad one is refused with its
// path and reason rather than failing every handshake later.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace gpumux {

struct TcpSecurityOptions {
  // "observe" or "full" (gpumuxd --tcp-mode).
  std::string mode = "observe";
  // PEM files: the listener's certificate chain and its private key (both or
  // neither; TLS when given) and the CA that signs client certificates
  // (mutual TLS; needs the other two). Empty: none.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // The file holding the bearer token (needs TLS). Empty: no token.
  std::string auth_token_file;
};

// True for mode "full".
bool ServesFullApiOverTcp(const TcpSecurityOptions& options);

// The credentials of the TCP listener: insecure with neither TLS nor token
// (observe mode only), else TLS, with BearerTokenProcessor when a token is
// given. INVALID_ARGUMENT naming the flag: an unknown mode; mode full without
// TLS or without a token; a token without TLS (it would cross the network
// in clear); --tls-cert without --tls-key or the other way round;
// --tls-client-ca without them; a file that cannot be read, holds no PEM
// certificate (or key), a key that does not match the certificate, a
// certificate that has expired; an empty or malformed token
// (ReadAuthTokenFile).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTcpServerCredentials(
    const TcpSecurityOptions& options);

}  // namespace gpumux
