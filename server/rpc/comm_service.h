#pragma once

// gpumux.v1.Comm: a thin adapter from the wire to CommWork; conversion lives
// in comm_proto.h. Calls that wait (options.wait, a gather to the host
// inline) run on the blocking executor, the rest on gRPC's threads.

#include "gpumux/v1/comm.grpc.pb.h"
#include "server/core/comm_work.h"
#include "server/core/session_registry.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

class CommService final : public v1::Comm::CallbackService {
 public:
  // All must outlive the service.
  CommService(CommWork* work, const SessionRegistry* sessions, BlockingExecutor* executor)
      : work_(work), sessions_(sessions), executor_(executor) {}

  grpc::ServerUnaryReactor* Broadcast(grpc::CallbackServerContext* context,
                                      const v1::BroadcastRequest* request,
                                      v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* BroadcastCoalesced(grpc::CallbackServerContext* context,
                                               const v1::BroadcastCoalescedRequest* request,
                                               v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* ReduceAdd(grpc::CallbackServerContext* context,
                                      const v1::ReduceAddRequest* request,
                                      v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* ReduceAddCoalesced(grpc::CallbackServerContext* context,
                                               const v1::ReduceAddCoalescedRequest* request,
                                               v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* Scatter(grpc::CallbackServerContext* context,
                                    const v1::ScatterRequest* request,
                                    v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* Gather(grpc::CallbackServerContext* context,
                                   const v1::GatherRequest* request,
                                   v1::CommResponse* response) override;
  grpc::ServerUnaryReactor* AllReduce(grpc::CallbackServerContext* context,
                                      const v1::AllReduceRequest* request,
                                      v1::CommResponse* response) override;

 private:
  CommWork* work_;
  const SessionRegistry* sessions_;
  BlockingExecutor* executor_;
};

}  // namespace gpumux
