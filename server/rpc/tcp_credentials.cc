#include "server/rpc/tcp_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/credential_files.h"
#include "grpcpp/security/server_credentials.h"
#include "server/rpc/bearer_token_processor.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Deleter {
  void operator()(X509* x509) const { X509_free(x509); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using UniqueBio = std::unique_ptr<BIO, BioDeleter>;
using UniqueX509 = std::unique_ptr<X509, X509Deleter>;
using UniqueKey = std::unique_ptr<EVP_PKEY, KeyDeleter>;

// OpenSSL's reason for the last failure, and an empty error queue.
std::string OpenSslReason() {
  const unsigned long error = ERR_peek_last_error();
  ERR_clear_error();
  if (error == 0) return "no PEM data";
  const char* reason = ERR_reason_error_string(error);
  return reason != nullptr ? reason : absl::StrCat("OpenSSL error ", error);
}

UniqueBio MemoryBio(const std::string& pem) {
  return UniqueBio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::Status Refuse(const char* flag, const std::string& path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "': ", reason));
}

// The first certificate of the PEM text of `flag`'s file `path`; refuses
// one that has expired or is not yet valid.
absl::StatusOr<UniqueX509> FirstCertificate(const char* flag, const std::string& path,
                                            const std::string& pem) {
  ERR_clear_error();
  UniqueBio bio = MemoryBio(pem);
  UniqueX509 cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return Refuse(flag, path, absl::StrCat("holds no PEM certificate (", OpenSslReason(), ")"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    return Refuse(flag, path, "the certificate has expired");
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0) {
    return Refuse(flag, path, "the certificate is not valid yet");
  }
  return cert;
}

// A pass phrase callback that has none: an encrypted key fails to load
// instead of prompting on the terminal.
int NoPassphrase(char* /*buffer*/, int /*size*/, int /*rwflag*/, void* /*user*/) { return -1; }

absl::Status CheckKey(const TcpSecurityOptions& options, const std::string& key_pem, X509* cert) {
  ERR_clear_error();
  UniqueBio bio = MemoryBio(key_pem);
  UniqueKey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return Refuse("--tls-key", options.tls_key_file,
                  absl::StrCat("holds no unencrypted PEM private key (", OpenSslReason(), ")"));
  }
  if (X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    return Refuse("--tls-key", options.tls_key_file,
                  absl::StrCat("the key does not belong to the certificate in --tls-cert '",
                               options.tls_cert_file, "'"));
  }
  return absl::OkStatus();
}

void WarnWhenOthersMayRead(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    spdlog::warn("--auth-token-file '{}' is readable by {} (mode {:o}): chmod 600 it", path,
                 (st.st_mode & S_IROTH) != 0 ? "every user" : "its group", st.st_mode & 0777);
  }
}

}  // namespace

bool ServesFullApiOverTcp(const TcpSecurityOptions& options) { return options.mode == "full"; }

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTcpServerCredentials(
    const TcpSecurityOptions& options) {
  if (options.mode != "observe" && options.mode != "full") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tcp-mode '", options.mode, "': use observe (the read-only surface) or full"));
  }
  const bool tls = !options.tls_cert_file.empty() || !options.tls_key_file.empty();
  if (tls && options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls-key needs --tls-cert (the listener's certificate)");
  }
  if (tls && options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert needs --tls-key (the certificate's key)");
  }
  if (!tls && !options.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS");
  }
  if (ServesFullApiOverTcp(options) && !tls) {
    return absl::InvalidArgumentError(
        "--tcp-mode=full needs TLS: give --tls-cert and --tls-key (and --auth-token-file)");
  }
  if (ServesFullApiOverTcp(options) && options.auth_token_file.empty()) {
    return absl::InvalidArgumentError(
        "--tcp-mode=full needs --auth-token-file: a file holding the bearer token every TCP "
        "call must carry");
  }
  if (!tls && !options.auth_token_file.empty()) {
    return absl::InvalidArgumentError(
        "--auth-token-file needs --tls-cert and --tls-key: a bearer token must not cross the "
        "network in clear");
  }
  if (!tls) return grpc::InsecureServerCredentials();

  GPUMUX_ASSIGN_OR_RETURN(std::string cert_pem,
                          ReadCredentialFile(options.tls_cert_file, "--tls-cert"));
  GPUMUX_ASSIGN_OR_RETURN(UniqueX509 cert,
                          FirstCertificate("--tls-cert", options.tls_cert_file, cert_pem));
  GPUMUX_ASSIGN_OR_RETURN(std::string key_pem,
                          ReadCredentialFile(options.tls_key_file, "--tls-key"));
  GPUMUX_RETURN_IF_ERROR(CheckKey(options, key_pem, cert.get()));
  std::string client_ca_pem;
  if (!options.tls_client_ca_file.empty()) {
    GPUMUX_ASSIGN_OR_RETURN(client_ca_pem,
                            ReadCredentialFile(options.tls_client_ca_file, "--tls-client-ca"));
    GPUMUX_RETURN_IF_ERROR(
        FirstCertificate("--tls-client-ca", options.tls_client_ca_file, client_ca_pem).status());
  }
  std::string token;
  if (!options.auth_token_file.empty()) {
    GPUMUX_ASSIGN_OR_RETURN(token, ReadAuthTokenFile(options.auth_token_file, "--auth-token-file"));
    WarnWhenOthersMayRead(options.auth_token_file);
  }

  grpc::SslServerCredentialsOptions ssl(
      client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = client_ca_pem;
  ssl.pem_key_cert_pairs.push_back({std::move(key_pem), std::move(cert_pem)});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(ssl);
  if (!token.empty()) {
    credentials->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(token));
  }
  return credentials;
}

}  // namespace gpumux
