#pragma once

// How a daemon reaches the other daemons of its groups (group.proto): the
// rendezvous on rank 0's daemon, and a liveness probe of each member. Over
// the peers' TCP listeners in full mode, with mutual TLS under the group's
// CA (gpumuxd --tls-client-ca, which must also have signed the peers' server
// certificates; the daemon's own --tls-cert and --tls-key are its client
// certificate) and the group's token (its own --auth-token-file). The
// daemons of a group thus share a CA and a token.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "server/core/rendezvous_store.h"

namespace gpumux {

struct PeerSecurityFiles {
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string auth_token_file;
};

class PeerChannels {
 public:
  // Reads the files now; with any of them empty, Rendezvous() is
  // FAILED_PRECONDITION naming the flags (the daemon cannot join a group
  // led by another daemon). INVALID_ARGUMENT for a file that cannot be read.
  static absl::StatusOr<std::unique_ptr<PeerChannels>> Create(const PeerSecurityFiles& files);

  // GroupRegistry::Hooks::connect_rendezvous: rank 0's store at "HOST:PORT".
  absl::StatusOr<std::unique_ptr<RendezvousPoint>> Rendezvous(const std::string& address) const;
  // GroupRegistry::Hooks::probe: whether grpc.health.v1.Health answers
  // SERVING at `address` within `timeout` (the probe needs no token).
  bool Probe(const std::string& address, absl::Duration timeout) const;

 private:
  PeerChannels() = default;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel(const std::string& address) const;

  bool configured_ = false;
  std::string ca_pem_;
  std::string cert_pem_;
  std::string key_pem_;
  std::string token_;
};

}  // namespace gpumux
