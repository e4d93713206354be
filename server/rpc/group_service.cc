#include "server/rpc/group_service.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "server/rpc/comm_proto.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/serve_collective.h"
#include "server/rpc/serve_session_call.h"
#include "server/rpc/session_auth.h"

namespace gpumux {
namespace {

// Runs `body()` (returning absl::Status) on `executor` under `key` and
// finishes the call with its status: a call of no session that waits.
template <typename Body>
grpc::ServerUnaryReactor* ServeWaiting(grpc::CallbackServerContext* context,
                                       BlockingExecutor& executor, uint64_t key, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started = executor.Run(
      key, [reactor, body = std::move(body)]() mutable { reactor->Finish(ToGrpcStatus(body())); });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));
  return reactor;
}

// The executor key of a group's waits: groups never hold back each other.
uint64_t GroupKey(const std::string& group) { return absl::Hash<std::string>{}(group); }

}  // namespace

void ToProto(const GroupInfoView& view, v1::GroupInfo* info) {
  info->set_name(view.spec.name);
  info->set_world_size(view.spec.world_size);
  info->set_rank(view.spec.rank);
  info->set_rendezvous_address(view.spec.rendezvous_address);
  info->set_generation(view.generation);
  for (const GroupMemberInfo& member : view.members) {
    v1::GroupMember* out = info->add_members();
    out->set_rank(member.rank);
    out->set_address(member.address);
  }
  info->set_timeout_ms(absl::ToInt64Milliseconds(view.spec.timeout));
  info->set_state(view.broken ? "broken" : "ready");
  info->set_error(view.error);
  info->set_collectives(view.collectives);
  info->set_bytes(view.bytes);
  info->set_formed_unix_ms(absl::ToUnixMillis(view.formed_at));
  info->set_form_ms(absl::ToDoubleMilliseconds(view.form_time));
  info->set_device(view.spec.device.value());
  info->set_device_communicator(view.device_communicator);
  info->set_tenant(view.spec.tenant);
  info->set_owner_session_id(view.spec.owner.value());
}

grpc::ServerUnaryReactor* GroupService::FormGroup(grpc::CallbackServerContext* context,
                                                  const v1::FormGroupRequest* request,
                                                  v1::GroupInfo* response) {
  return ServeBlockingSessionCall(
      context, *sessions_, *executor_,
      [groups = groups_, work = work_, sessions = sessions_, request,
       response](SessionId session) -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(const absl::Duration timeout, GroupTimeout(request->timeout_ms()));
        const DeviceIndex device(request->device());
        GPUMUX_RETURN_IF_ERROR(work->CheckDevice(device));
        GPUMUX_ASSIGN_OR_RETURN(std::string tenant, sessions->NamedTenantOf(session));
        GPUMUX_ASSIGN_OR_RETURN(
            const GroupInfoView view,
            groups->Form(GroupSpec{.name = request->name(),
                                   .tenant = std::move(tenant),
                                   .owner = session,
                                   .world_size = request->world_size(),
                                   .rank = request->rank(),
                                   .rendezvous_address = request->rendezvous_address(),
                                   .timeout = timeout,
                                   .device = device}));
        ToProto(view, response);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* GroupService::DestroyGroup(grpc::CallbackServerContext* context,
                                                     const v1::DestroyGroupRequest* request,
                                                     v1::DestroyGroupResponse*) {
  // It waits for a running collective of the group.
  return ServeBlockingSessionCall(
      context, *sessions_, *executor_,
      [groups = groups_, sessions = sessions_, request](SessionId session) -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(const std::string tenant, sessions->NamedTenantOf(session));
        return groups->Destroy(GroupRef{tenant, request->name()});
      });
}

grpc::ServerUnaryReactor* GroupService::ListGroups(grpc::CallbackServerContext* context,
                                                   const v1::ListGroupsRequest*,
                                                   v1::ListGroupsResponse* response) {
  // A session sees its tenant's groups; a call of no session (an operator's
  // `gpumux groups`, as Observe shows every session) sees every group.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::optional<std::string> tenant;
  if (context->client_metadata().count(kSessionMetadataKey) != 0) {
    absl::StatusOr<SessionId> session = AuthenticateCall(*context, *sessions_);
    absl::StatusOr<std::string> named =
        session.ok() ? sessions_->NamedTenantOf(*session) : session.status();
    if (!named.ok()) {
      reactor->Finish(ToGrpcStatus(named.status()));
      return reactor;
    }
    tenant = *std::move(named);
  }
  for (const GroupInfoView& view : groups_->List()) {
    if (!tenant.has_value() || view.spec.tenant == *tenant) ToProto(view, response->add_groups());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GroupService::AllReduce(grpc::CallbackServerContext* context,
                                                  const v1::GroupAllReduceRequest* request,
                                                  v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(),
      /*blocking=*/!work_->Queues(request->options().async_op()), response,
      [work = work_, sessions = sessions_, request](
          SessionId session, const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::string tenant, sessions->NamedTenantOf(session));
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor tensor, FromProto(request->tensor()));
        GPUMUX_ASSIGN_OR_RETURN(const ReduceOp op, FromProto(request->op()));
        return work->AllReduce(session, GroupRef{tenant, request->group()}, tensor, op, options);
      });
}

grpc::ServerUnaryReactor* GroupService::Broadcast(grpc::CallbackServerContext* context,
                                                  const v1::GroupBroadcastRequest* request,
                                                  v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(),
      /*blocking=*/!work_->Queues(request->options().async_op()), response,
      [work = work_, sessions = sessions_, request](
          SessionId session, const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::string tenant, sessions->NamedTenantOf(session));
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor tensor, FromProto(request->tensor()));
        return work->Broadcast(session, GroupRef{tenant, request->group()}, tensor, request->root(),
                               options);
      });
}

grpc::ServerUnaryReactor* GroupService::AllGather(grpc::CallbackServerContext* context,
                                                  const v1::GroupAllGatherRequest* request,
                                                  v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(),
      /*blocking=*/!work_->Queues(request->options().async_op()), response,
      [work = work_, sessions = sessions_, request](
          SessionId session, const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::string tenant, sessions->NamedTenantOf(session));
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor input, FromProto(request->input()));
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor output, FromProto(request->output()));
        return work->AllGather(session, GroupRef{tenant, request->group()}, input, output, options);
      });
}

grpc::ServerUnaryReactor* GroupService::ReduceScatter(grpc::CallbackServerContext* context,
                                                      const v1::GroupReduceScatterRequest* request,
                                                      v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(),
      /*blocking=*/!work_->Queues(request->options().async_op()), response,
      [work = work_, sessions = sessions_, request](
          SessionId session, const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::string tenant, sessions->NamedTenantOf(session));
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor input, FromProto(request->input()));
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor output, FromProto(request->output()));
        GPUMUX_ASSIGN_OR_RETURN(const ReduceOp op, FromProto(request->op()));
        return work->ReduceScatter(session, GroupRef{tenant, request->group()}, input, output, op,
                                   options);
      });
}

grpc::ServerUnaryReactor* RendezvousService::Join(grpc::CallbackServerContext* context,
                                                  const v1::RendezvousJoinRequest* request,
                                                  v1::RendezvousJoinResponse* response) {
  return ServeWaiting(
      context, executor_, GroupKey(request->group()),
      [store = store_, request, response]() -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(const absl::Duration timeout, GroupTimeout(request->timeout_ms()));
        GPUMUX_ASSIGN_OR_RETURN(const RendezvousRound round,
                                store->Join(request->group(), request->world_size(),
                                            request->rank(), request->address(), timeout));
        response->set_generation(round.generation);
        for (const GroupMemberInfo& member : round.members) {
          v1::GroupMember* out = response->add_members();
          out->set_rank(member.rank);
          out->set_address(member.address);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* RendezvousService::Set(grpc::CallbackServerContext* context,
                                                 const v1::RendezvousSetRequest* request,
                                                 v1::RendezvousSetResponse*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(
      store_->Set(request->group(), request->generation(), request->key(), request->value())));
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::Get(grpc::CallbackServerContext* context,
                                                 const v1::RendezvousGetRequest* request,
                                                 v1::RendezvousGetResponse* response) {
  return ServeWaiting(
      context, executor_, GroupKey(request->group()),
      [store = store_, request, response]() -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(const absl::Duration timeout, GroupTimeout(request->timeout_ms()));
        GPUMUX_ASSIGN_OR_RETURN(
            std::string value,
            store->Get(request->group(), request->generation(), request->key(), timeout));
        response->set_value(std::move(value));
        return absl::OkStatus();
      });
}

}  // namespace gpumux
