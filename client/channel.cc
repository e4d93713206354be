#include "client/channel.h"

#include "absl/strings/str_cat.h"
#include "common/default_address.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gpumux {

std::shared_ptr<grpc::Channel> CreateDaemonChannel(absl::string_view address) {
  grpc::ChannelArguments arguments;
  // Unlimited both ways: inline copies carry up to 64 MiB of bytes plus the
  // message around them, and snapshots of busy devices outgrow 4 MiB.
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(ToGrpcTarget(address), grpc::InsecureChannelCredentials(),
                                   arguments);
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
