#include "client/channel.h"

#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/credential_files.h"
#include "gpumux/common/default_address.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gpumux {
namespace {

// Sends the token with every call; gRPC sends call credentials only over a
// channel with privacy and integrity (TLS), never in clear.
class BearerTokenPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit BearerTokenPlugin(const std::string& token) : header_(absl::StrCat("Bearer ", token)) {}
  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "gpumux-bearer-token"; }
  grpc::Status GetMetadata(grpc::string_ref /*service_url*/, grpc::string_ref /*method_name*/,
                           const grpc::AuthContext& /*channel_auth_context*/,
                           std::multimap<grpc::string, grpc::string>* metadata) override {
    metadata->insert({"authorization", header_});
    return grpc::Status::OK;
  }
  grpc::string DebugString() override { return "gpumux bearer token (not shown)"; }

 private:
  const std::string header_;
};

struct Field {
  std::string ChannelSecurity::*member;
  const char* flag;  // the gpumux CLI's
  const char* variable;
  const char* what;
};
constexpr Field kFields[] = {
    {&ChannelSecurity::tls_ca_file, "--tls-ca", "GPUMUX_TLS_CA", "the TLS CA file"},
    {&ChannelSecurity::tls_cert_file, "--tls-cert", "GPUMUX_TLS_CERT",
     "the TLS client certificate"},
    {&ChannelSecurity::tls_key_file, "--tls-key", "GPUMUX_TLS_KEY", "the TLS client key"},
    {&ChannelSecurity::auth_token_file, "--auth-token-file", "GPUMUX_AUTH_TOKEN_FILE",
     "the auth token file"},
    {&ChannelSecurity::tls_server_name, "--tls-server-name", "GPUMUX_TLS_SERVER_NAME",
     "the TLS server name"},
};

// "the TLS CA file (--tls-ca, GPUMUX_TLS_CA)": how messages name a field.
std::string Name(const Field& field) {
  return absl::StrCat(field.what, " (", field.flag, ", ", field.variable, ")");
}

const Field& FieldOf(std::string ChannelSecurity::*member) {
  for (const Field& field : kFields) {
    if (field.member == member) return field;
  }
  return kFields[0];
}

absl::StatusOr<std::string> ReadPem(const ChannelSecurity& security,
                                    std::string ChannelSecurity::*member, absl::string_view label) {
  const Field& field = FieldOf(member);
  const std::string& path = security.*member;
  GPUMUX_ASSIGN_OR_RETURN(std::string pem, ReadCredentialFile(path, Name(field)));
  if (!HoldsPemBlock(pem, label)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(field), " '", path, "': holds no PEM ", label));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(
    const ChannelSecurity& security) {
  grpc::SslCredentialsOptions ssl;
  GPUMUX_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                          ReadPem(security, &ChannelSecurity::tls_ca_file, "CERTIFICATE"));
  if (security.tls_cert_file.empty() != security.tls_key_file.empty()) {
    const Field& given = FieldOf(security.tls_cert_file.empty() ? &ChannelSecurity::tls_key_file
                                                                : &ChannelSecurity::tls_cert_file);
    const Field& missing = FieldOf(security.tls_cert_file.empty() ? &ChannelSecurity::tls_cert_file
                                                                  : &ChannelSecurity::tls_key_file);
    return absl::InvalidArgumentError(absl::StrCat(Name(given), " needs ", Name(missing), " too"));
  }
  if (!security.tls_cert_file.empty()) {
    GPUMUX_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                            ReadPem(security, &ChannelSecurity::tls_cert_file, "CERTIFICATE"));
    GPUMUX_ASSIGN_OR_RETURN(ssl.pem_private_key,
                            ReadPem(security, &ChannelSecurity::tls_key_file, "PRIVATE KEY"));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (!security.auth_token_file.empty()) {
    GPUMUX_ASSIGN_OR_RETURN(std::string token,
                            ReadAuthTokenFile(security.auth_token_file,
                                              Name(FieldOf(&ChannelSecurity::auth_token_file))));
    credentials = grpc::CompositeChannelCredentials(
        credentials,
        grpc::MetadataCredentialsFromPlugin(std::make_unique<BearerTokenPlugin>(token)));
  }
  return credentials;
}

}  // namespace

bool IsUnixAddress(absl::string_view address) {
  return absl::StartsWith(ToGrpcTarget(address), "unix:");
}

ChannelSecurity ResolveChannelSecurity(const ChannelSecurity& security) {
  ChannelSecurity resolved = security;
  for (const Field& field : kFields) {
    std::string& value = resolved.*field.member;
    if (!value.empty()) continue;
    if (const char* env = std::getenv(field.variable); env != nullptr) value = env;
  }
  return resolved;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateDaemonChannel(
    absl::string_view address, const ChannelSecurity& security) {
  grpc::ChannelArguments arguments;
  // Unlimited both ways: inline copies carry up to 64 MiB of bytes plus the
  // message around them, and snapshots of busy devices outgrow 4 MiB.
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  const std::string target = ToGrpcTarget(address);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!IsUnixAddress(target)) {
    const ChannelSecurity resolved = ResolveChannelSecurity(security);
    if (!resolved.tls_ca_file.empty()) {
      GPUMUX_ASSIGN_OR_RETURN(credentials, TlsCredentials(resolved));
      if (!resolved.tls_server_name.empty()) {
        arguments.SetSslTargetNameOverride(resolved.tls_server_name);
      }
    } else {
      for (const Field& field : kFields) {
        if (field.member == &ChannelSecurity::tls_ca_file || (resolved.*field.member).empty())
          continue;
        return absl::InvalidArgumentError(absl::StrCat(
            Name(field), " '", resolved.*field.member, "' needs TLS to ", address,
            ": give the CA that verifies gpumuxd's certificate (--tls-ca, GPUMUX_TLS_CA)"));
      }
    }
  }
  return grpc::CreateCustomChannel(target, credentials, arguments);
}

absl::Status AwaitConnectAttempt(grpc::Channel& channel, absl::Duration timeout,
                                 absl::string_view address) {
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         state != GRPC_CHANNEL_SHUTDOWN) {
    if (!channel.WaitForStateChange(state, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("gpumuxd at ", address,
                                                      " did not accept a connection within ",
                                                      absl::FormatDuration(timeout)));
    }
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return absl::OkStatus();
}

}  // namespace gpumux
