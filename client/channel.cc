#include "client/channel.h"

#include "common/default_address.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gpumux {

std::shared_ptr<grpc::Channel> CreateDaemonChannel(absl::string_view address) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(ToGrpcTarget(address), grpc::InsecureChannelCredentials(),
                                   arguments);
}

}  // namespace gpumux
