#include "server/rpc/peer_channels.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/credential_files.h"
#include "gpumux/v1/group.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gpumux {
namespace {

// Beyond the call's own wait: time for the network.
constexpr absl::Duration kCallSlack = absl::Seconds(10);

absl::Status FromGrpc(const grpc::Status& status, absl::string_view address) {
  if (status.ok()) return absl::OkStatus();
  std::string message = status.error_message();
  // A status the rendezvous itself returned reads as it is; gRPC's own
  // (unreachable, refused) names the daemon.
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    message = absl::StrCat("the rendezvous at ", address, ": ", message);
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
}

class RemoteRendezvous final : public RendezvousPoint {
 public:
  RemoteRendezvous(std::shared_ptr<grpc::Channel> channel, std::string address, std::string token)
      : stub_(v1::Rendezvous::NewStub(channel)),
        address_(std::move(address)),
        token_(std::move(token)) {}

  absl::StatusOr<RendezvousRound> Join(absl::string_view group, int world_size, int rank,
                                       absl::string_view address, absl::Duration timeout) override {
    v1::RendezvousJoinRequest request;
    request.set_group(std::string(group));
    request.set_world_size(world_size);
    request.set_rank(rank);
    request.set_address(std::string(address));
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    v1::RendezvousJoinResponse response;
    grpc::ClientContext context;
    Prepare(context, timeout);
    GPUMUX_RETURN_IF_ERROR(FromGrpc(stub_->Join(&context, request, &response), address_));
    RendezvousRound round{response.generation(), {}};
    for (const v1::GroupMember& member : response.members()) {
      round.members.push_back(GroupMemberInfo{member.rank(), member.address()});
    }
    return round;
  }

  absl::Status Set(absl::string_view group, uint64_t generation, absl::string_view key,
                   absl::string_view value) override {
    v1::RendezvousSetRequest request;
    request.set_group(std::string(group));
    request.set_generation(generation);
    request.set_key(std::string(key));
    request.set_value(std::string(value));
    v1::RendezvousSetResponse response;
    grpc::ClientContext context;
    Prepare(context, absl::ZeroDuration());
    return FromGrpc(stub_->Set(&context, request, &response), address_);
  }

  absl::StatusOr<std::string> Get(absl::string_view group, uint64_t generation,
                                  absl::string_view key, absl::Duration timeout) override {
    v1::RendezvousGetRequest request;
    request.set_group(std::string(group));
    request.set_generation(generation);
    request.set_key(std::string(key));
    request.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
    v1::RendezvousGetResponse response;
    grpc::ClientContext context;
    Prepare(context, timeout);
    GPUMUX_RETURN_IF_ERROR(FromGrpc(stub_->Get(&context, request, &response), address_));
    return std::move(*response.mutable_value());
  }

 private:
  void Prepare(grpc::ClientContext& context, absl::Duration wait) const {
    context.set_deadline(absl::ToChronoTime(absl::Now() + wait + kCallSlack));
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }

  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  const std::string address_;
  const std::string token_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PeerChannels>> PeerChannels::Create(const PeerSecurityFiles& files) {
  std::unique_ptr<PeerChannels> channels(new PeerChannels());
  if (files.tls_ca_file.empty() || files.tls_cert_file.empty() || files.tls_key_file.empty() ||
      files.auth_token_file.empty()) {
    return channels;
  }
  GPUMUX_ASSIGN_OR_RETURN(
      channels->ca_pem_,
      ReadCredentialFile(files.tls_ca_file, "the TLS client CA (--tls-client-ca)"));
  GPUMUX_ASSIGN_OR_RETURN(
      channels->cert_pem_,
      ReadCredentialFile(files.tls_cert_file, "the TLS certificate (--tls-cert)"));
  GPUMUX_ASSIGN_OR_RETURN(channels->key_pem_,
                          ReadCredentialFile(files.tls_key_file, "the TLS key (--tls-key)"));
  GPUMUX_ASSIGN_OR_RETURN(
      channels->token_,
      ReadAuthTokenFile(files.auth_token_file, "the auth token file (--auth-token-file)"));
  channels->configured_ = true;
  return channels;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> PeerChannels::Channel(
    const std::string& address) const {
  if (!configured_) {
    return absl::FailedPreconditionError(
        "reaching the other daemons of a group needs TLS and the group's token: start gpumuxd "
        "with --listen, --tcp-mode=full, --tls-cert, --tls-key, --tls-client-ca (the group's CA) "
        "and --auth-token-file (the group's token)");
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem_;
  ssl.pem_cert_chain = cert_pem_;
  ssl.pem_private_key = key_pem_;
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), arguments);
}

absl::StatusOr<std::unique_ptr<RendezvousPoint>> PeerChannels::Rendezvous(
    const std::string& address) const {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Channel(address));
  return std::make_unique<RemoteRendezvous>(std::move(channel), address, token_);
}

bool PeerChannels::Probe(const std::string& address, absl::Duration timeout) const {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Channel(address);
  if (!channel.ok()) return false;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(*channel)->Check(&context, request, &response);
  return status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace gpumux
