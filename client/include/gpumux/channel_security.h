#pragma once

// How a client secures its connection to gpumuxd's TCP listener (README
// "The full API over TCP (TLS)"): TLS verified against a CA, optionally a
// client certificate (mutual TLS), and a bearer token sent with every call.
// A Unix-socket address ignores all of it: the socket's permissions guard
// that connection.

#include <string>

namespace gpumux {

struct ChannelSecurity {
  // Each field is a path (or a name), and each left empty takes its
  // environment variable, when that is set and non-empty.
  //
  // PEM CA certificates that verify gpumuxd's certificate ($GPUMUX_TLS_CA).
  // A TCP address uses TLS when this is given, plaintext otherwise.
  std::string tls_ca_file;
  // PEM certificate chain and private key of this client, for a daemon that
  // requires client certificates ($GPUMUX_TLS_CERT, $GPUMUX_TLS_KEY); both or
  // neither; need TLS.
  std::string tls_cert_file;
  std::string tls_key_file;
  // A file holding the bearer token (a trailing newline is dropped), sent as
  // `authorization: Bearer <token>` on every call ($GPUMUX_AUTH_TOKEN_FILE);
  // needs TLS.
  std::string auth_token_file;
  // The name gpumuxd's certificate is checked against instead of the
  // address's host, for a certificate that does not name the address
  // ($GPUMUX_TLS_SERVER_NAME).
  std::string tls_server_name;
};

}  // namespace gpumux
