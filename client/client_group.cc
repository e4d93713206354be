// Groups of daemons (gpumux/distributed.h).

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "gpumux/distributed.h"

namespace gpumux {
namespace {

// Runs a group RPC through `run` (which maps statuses as every call does),
// keeping the daemon's own UNAVAILABLE about a group's peer as it is: it
// names the peer, not an unreachable daemon of this client.
template <typename Run, typename Rpc>
auto KeepGroupUnavailable(Run run, Rpc rpc) {
  grpc::Status peer_failure;
  auto result = run([&](auto&&... args) {
    grpc::Status status = rpc(args...);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        absl::StartsWith(status.error_message(), "group \"")) {
      peer_failure = status;
    }
    return status;
  });
  if (!result.ok() && !peer_failure.ok()) {
    return decltype(result)(absl::UnavailableError(peer_failure.error_message()));
  }
  return result;
}

}  // namespace

absl::StatusOr<DaemonGroupInfo> distributed::FormGroup(Client& client,
                                                       const FormGroupOptions& options) {
  GPUMUX_PROFILED("distributed::FormGroup");
  auto& impl = ImplOf(client);
  v1::FormGroupRequest request;
  request.set_name(options.name);
  request.set_world_size(options.world_size);
  request.set_rank(options.rank);
  request.set_rendezvous_address(options.rendezvous_address);
  request.set_timeout_ms(absl::ToInt64Milliseconds(options.timeout));
  request.set_device(options.device.value());
  v1::GroupInfo response;
  GPUMUX_RETURN_IF_ERROR(KeepGroupUnavailable([&](auto rpc) { return impl.CallWithSession(rpc); },
                                              [&](grpc::ClientContext* context) {
                                                return impl.group_stub_->FormGroup(context, request,
                                                                                   &response);
                                              }));
  return FromProto(response);
}

absl::Status distributed::DestroyGroup(Client& client, absl::string_view name) {
  GPUMUX_PROFILED("distributed::DestroyGroup");
  auto& impl = ImplOf(client);
  v1::DestroyGroupRequest request;
  request.set_name(std::string(name));
  v1::DestroyGroupResponse response;
  return impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.group_stub_->DestroyGroup(context, request, &response);
  });
}

absl::StatusOr<std::vector<DaemonGroupInfo>> distributed::ListGroups(Client& client) {
  GPUMUX_PROFILED("distributed::ListGroups");
  auto& impl = ImplOf(client);
  v1::ListGroupsResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.group_stub_->ListGroups(context, v1::ListGroupsRequest(), &response);
  }));
  std::vector<DaemonGroupInfo> groups;
  for (const v1::GroupInfo& group : response.groups()) groups.push_back(FromProto(group));
  return groups;
}

absl::StatusOr<CollectiveResult> distributed::AllReduce(Client& client, absl::string_view group,
                                                        const TensorRef& tensor, ReduceOp op,
                                                        const CollectiveOptions& options) {
  GPUMUX_PROFILED("distributed::AllReduce");
  auto& impl = ImplOf(client);
  if (!options.async_op) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::GroupAllReduceRequest request;
  request.set_group(std::string(group));
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_tensor(), tensor, "tensor", call));
  request.set_op(ToProto(op));
  GPUMUX_RETURN_IF_ERROR(impl.SetCommOptions(request.mutable_options(), options, call));
  return KeepGroupUnavailable(
      [&](auto rpc) { return impl.RunCollective(call, /*waited=*/!options.async_op, rpc); },
      [&](grpc::ClientContext* context, v1::CommResponse* response) {
        return impl.group_stub_->AllReduce(context, request, response);
      });
}

absl::StatusOr<CollectiveResult> distributed::Broadcast(Client& client, absl::string_view group,
                                                        const TensorRef& tensor, int root,
                                                        const CollectiveOptions& options) {
  GPUMUX_PROFILED("distributed::Broadcast");
  auto& impl = ImplOf(client);
  if (!options.async_op) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::GroupBroadcastRequest request;
  request.set_group(std::string(group));
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_tensor(), tensor, "tensor", call));
  request.set_root(root);
  GPUMUX_RETURN_IF_ERROR(impl.SetCommOptions(request.mutable_options(), options, call));
  return KeepGroupUnavailable(
      [&](auto rpc) { return impl.RunCollective(call, /*waited=*/!options.async_op, rpc); },
      [&](grpc::ClientContext* context, v1::CommResponse* response) {
        return impl.group_stub_->Broadcast(context, request, response);
      });
}

absl::StatusOr<CollectiveResult> distributed::AllGatherIntoTensor(
    Client& client, absl::string_view group, const TensorRef& input, const TensorRef& output,
    const CollectiveOptions& options) {
  GPUMUX_PROFILED("distributed::AllGatherIntoTensor");
  auto& impl = ImplOf(client);
  if (!options.async_op) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::GroupAllGatherRequest request;
  request.set_group(std::string(group));
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_input(), input, "input", call));
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_output(), output, "output", call));
  GPUMUX_RETURN_IF_ERROR(impl.SetCommOptions(request.mutable_options(), options, call));
  return KeepGroupUnavailable(
      [&](auto rpc) { return impl.RunCollective(call, /*waited=*/!options.async_op, rpc); },
      [&](grpc::ClientContext* context, v1::CommResponse* response) {
        return impl.group_stub_->AllGather(context, request, response);
      });
}

absl::StatusOr<CollectiveResult> distributed::ReduceScatterTensor(
    Client& client, absl::string_view group, const TensorRef& input, const TensorRef& output,
    ReduceOp op, const CollectiveOptions& options) {
  GPUMUX_PROFILED("distributed::ReduceScatterTensor");
  auto& impl = ImplOf(client);
  if (!options.async_op) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::GroupReduceScatterRequest request;
  request.set_group(std::string(group));
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_input(), input, "input", call));
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_output(), output, "output", call));
  request.set_op(ToProto(op));
  GPUMUX_RETURN_IF_ERROR(impl.SetCommOptions(request.mutable_options(), options, call));
  return KeepGroupUnavailable(
      [&](auto rpc) { return impl.RunCollective(call, /*waited=*/!options.async_op, rpc); },
      [&](grpc::ClientContext* context, v1::CommResponse* response) {
        return impl.group_stub_->ReduceScatter(context, request, response);
      });
}

}  // namespace gpumux
