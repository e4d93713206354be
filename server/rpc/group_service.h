#pragma once

// gpumux.v1.Group and gpumux.v1.Rendezvous (proto/gpumux/v1/group.proto):
// thin adapters from the wire to GroupRegistry, GroupWork and rank 0's
// RendezvousStore. Calls that wait for other daemons run on the blocking
// executor.

#include "gpumux/v1/group.grpc.pb.h"
#include "server/core/group_registry.h"
#include "server/core/group_work.h"
#include "server/core/rendezvous_store.h"
#include "server/core/session_registry.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

void ToProto(const GroupInfoView& view, v1::GroupInfo* info);

class GroupService final : public v1::Group::CallbackService {
 public:
  // All must outlive the service.
  GroupService(GroupRegistry* groups, GroupWork* work, const SessionRegistry* sessions,
               BlockingExecutor* executor)
      : groups_(groups), work_(work), sessions_(sessions), executor_(executor) {}

  grpc::ServerUnaryReactor* FormGroup(grpc::CallbackServerContext* context,
                                      const v1::FormGroupRequest* request,
                                      v1::GroupInfo* response) override;
  grpc::ServerUnaryReactor* DestroyGroup(grpc::CallbackServerContext* context,
                                         const v1::DestroyGroupRequest* request,
                                         v1::DestroyGroupResponse* response) override;
  grpc::ServerUnaryReactor* ListGroups(grpc::CallbackServerContext* context,
                                       const v1::ListGroupsRequest* request,
                                       v1::ListGroupsResponse* response) override;
  grpc::ServerUnaryReactor* AllReduce(grpc::CallbackServerContext* context,
                                      const v1::GroupAllReduceRequest* request,
                                      v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* Broadcast(grpc::CallbackServerContext* context,
                                      const v1::GroupBroadcastRequest* request,
                                      v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* AllGather(grpc::CallbackServerContext* context,
                                      const v1::GroupAllGatherRequest* request,
                                      v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* ReduceScatter(grpc::CallbackServerContext* context,
                                          const v1::GroupReduceScatterRequest* request,
                                          v1::CommResponse* response) override;

 private:
  GroupRegistry* groups_;
  GroupWork* work_;
  const SessionRegistry* sessions_;
  BlockingExecutor* executor_;
};

class RendezvousService final : public v1::Rendezvous::CallbackService {
 public:
  // `store` must outlive the service. Waits run on the service's own
  // executor, which lets every rank of a group wait at once.
  explicit RendezvousService(RendezvousStore* store)
      : store_(store), executor_(kMaxGroupWorldSize, 2 * kMaxGroupWorldSize) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const v1::RendezvousJoinRequest* request,
                                 v1::RendezvousJoinResponse* response) override;
  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* context,
                                const v1::RendezvousSetRequest* request,
                                v1::RendezvousSetResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::RendezvousGetRequest* request,
                                v1::RendezvousGetResponse* response) override;

 private:
  RendezvousStore* store_;
  BlockingExecutor executor_;
};

}  // namespace gpumux
