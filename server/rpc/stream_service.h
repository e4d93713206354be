#pragma once

// gpumux.v1.Stream: a thin adapter from the wire to StreamManager's streams
// (events: event_service.h). Every call authenticates its session first;
// conversion lives in stream_proto.h.

#include "gpumux/v1/stream.grpc.pb.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

// Synchronize answers at once when the work is done and otherwise waits on
// `executor`, never on a gRPC thread.
class StreamService final : public v1::Stream::CallbackService {
 public:
  // All must outlive the service.
  StreamService(StreamManager* streams, const SessionRegistry* sessions, BlockingExecutor* executor)
      : streams_(streams), sessions_(sessions), executor_(executor) {}

  grpc::ServerUnaryReactor* GetPriorityRange(grpc::CallbackServerContext* context,
                                             const v1::GetPriorityRangeRequest* request,
                                             v1::GetPriorityRangeResponse* response) override;
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext* context,
                                   const v1::CreateStreamRequest* request,
                                   v1::CreateStreamResponse* response) override;
  grpc::ServerUnaryReactor* Destroy(grpc::CallbackServerContext* context,
                                    const v1::DestroyStreamRequest* request,
                                    v1::DestroyStreamResponse* response) override;
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* context,
                                  const v1::StreamRequest* request,
                                  v1::QueryStreamResponse* response) override;
  grpc::ServerUnaryReactor* Synchronize(grpc::CallbackServerContext* context,
                                        const v1::StreamRequest* request,
                                        v1::SynchronizeStreamResponse* response) override;
  grpc::ServerUnaryReactor* WaitEvent(grpc::CallbackServerContext* context,
                                      const v1::WaitEventRequest* request,
                                      v1::WaitEventResponse* response) override;
  grpc::ServerUnaryReactor* WaitStream(grpc::CallbackServerContext* context,
                                       const v1::WaitStreamRequest* request,
                                       v1::WaitStreamResponse* response) override;

 private:
  StreamManager* streams_;
  const SessionRegistry* sessions_;
  BlockingExecutor* executor_;
};

}  // namespace gpumux
