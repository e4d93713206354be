#pragma once

// gpumux.v1.Event: a thin adapter from the wire to StreamManager's events
// (torch.cuda.Event, interprocess handles included). Every call
// authenticates its session first; conversion lives in event_proto.h.

#include "gpumux/v1/stream.grpc.pb.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

// Synchronize answers at once when the event completed and otherwise waits
// on `executor`, never on a gRPC thread.
class EventService final : public v1::Event::CallbackService {
 public:
  // All must outlive the service.
  EventService(StreamManager* streams, const SessionRegistry* sessions, BlockingExecutor* executor)
      : streams_(streams), sessions_(sessions), executor_(executor) {}

  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext* context,
                                   const v1::CreateEventRequest* request,
                                   v1::CreateEventResponse* response) override;
  grpc::ServerUnaryReactor* Destroy(grpc::CallbackServerContext* context,
                                    const v1::EventRequest* request,
                                    v1::DestroyEventResponse* response) override;
  grpc::ServerUnaryReactor* Record(grpc::CallbackServerContext* context,
                                   const v1::RecordEventRequest* request,
                                   v1::RecordEventResponse* response) override;
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* context,
                                  const v1::EventRequest* request,
                                  v1::QueryEventResponse* response) override;
  grpc::ServerUnaryReactor* Synchronize(grpc::CallbackServerContext* context,
                                        const v1::EventRequest* request,
                                        v1::SynchronizeEventResponse* response) override;
  grpc::ServerUnaryReactor* ElapsedTime(grpc::CallbackServerContext* context,
                                        const v1::ElapsedTimeRequest* request,
                                        v1::ElapsedTimeResponse* response) override;
  grpc::ServerUnaryReactor* GetIpcHandle(grpc::CallbackServerContext* context,
                                         const v1::EventRequest* request,
                                         v1::GetIpcHandleResponse* response) override;
  grpc::ServerUnaryReactor* OpenIpcHandle(grpc::CallbackServerContext* context,
                                          const v1::OpenIpcHandleRequest* request,
                                          v1::CreateEventResponse* response) override;

 private:
  StreamManager* streams_;
  const SessionRegistry* sessions_;
  BlockingExecutor* executor_;
};

}  // namespace gpumux
