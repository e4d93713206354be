#pragma once

// BearerTokenProcessor: the TCP listener's check that every call carries
// `authorization: Bearer <token>` with the daemon's token. It runs as the
// server credentials' AuthMetadataProcessor, inside gRPC's server auth
// filter, before a call reaches any service (generic, health and reflection
// included), so no method can bypass it. One method is exempt:
// grpc.health.v1.Health/Check, which says only whether a service is
// SERVING, so that health probes (grpc_health_probe, load balancers) need
// no token.

#include <array>
#include <string>

#include "grpcpp/security/auth_metadata_processor.h"

namespace gpumux {

class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // The method served without a token.
  static constexpr char kExemptMethod[] = "/grpc.health.v1.Health/Check";

  // `token` is non-empty (ReadAuthTokenFile checks it); only its SHA-256
  // digest is kept.
  explicit BearerTokenProcessor(const std::string& token);

  // Cheap and lock-free: runs on the call's own thread.
  bool IsBlocking() const override { return false; }

  // OK for a call whose one `authorization` entry is "Bearer <the token>"
  // (scheme in any case), which it then removes from the call's metadata;
  // UNAUTHENTICATED saying what is wrong (no entry, several, another scheme,
  // an empty token, a wrong one) otherwise. The presented token is compared
  // in constant time, by digest, and never appears in a message.
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  std::array<unsigned char, 32> digest_;
};

}  // namespace gpumux
