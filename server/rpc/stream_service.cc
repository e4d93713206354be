#include "server/rpc/stream_service.h"

#include "common/base/status_macros.h"
#include "server/rpc/serve_session_call.h"
#include "server/rpc/stream_proto.h"

namespace gpumux {

grpc::ServerUnaryReactor* StreamService::GetPriorityRange(
    grpc::CallbackServerContext* context, const v1::GetPriorityRangeRequest* request,
    v1::GetPriorityRangeResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(StreamPriorityRange range,
                            streams_->PriorityRange(DeviceIndex(request->device())));
    ToProto(range, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* StreamService::Create(grpc::CallbackServerContext* context,
                                                const v1::CreateStreamRequest* request,
                                                v1::CreateStreamResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(
        StreamManager::CreatedStream created,
        streams_->CreateStream(session, DeviceIndex(request->device()), request->priority()));
    ToProto(created, DeviceIndex(request->device()), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* StreamService::Destroy(grpc::CallbackServerContext* context,
                                                 const v1::DestroyStreamRequest* request,
                                                 v1::DestroyStreamResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->DestroyStream(session, DeviceOf(request->stream()),
                                   StreamOf(request->stream()));
  });
}

grpc::ServerUnaryReactor* StreamService::Query(grpc::CallbackServerContext* context,
                                               const v1::StreamRequest* request,
                                               v1::QueryStreamResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(bool done, streams_->QueryStream(session, DeviceOf(request->stream()),
                                                             StreamOf(request->stream())));
    response->set_done(done);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* StreamService::Synchronize(grpc::CallbackServerContext* context,
                                                     const v1::StreamRequest* request,
                                                     v1::SynchronizeStreamResponse* /*response*/) {
  const DeviceIndex device = DeviceOf(request->stream());
  const StreamId stream = StreamOf(request->stream());
  return ServeSynchronize(
      context, *sessions_, *executor_,
      [&](SessionId session) { return streams_->TrySynchronizeStream(session, device, stream); },
      [streams = streams_, device, stream](SessionId session) {
        return streams->SynchronizeStream(session, device, stream);
      });
}

grpc::ServerUnaryReactor* StreamService::WaitEvent(grpc::CallbackServerContext* context,
                                                   const v1::WaitEventRequest* request,
                                                   v1::WaitEventResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->WaitEvent(session, DeviceOf(request->stream()), StreamOf(request->stream()),
                               EventId(request->event()));
  });
}

grpc::ServerUnaryReactor* StreamService::WaitStream(grpc::CallbackServerContext* context,
                                                    const v1::WaitStreamRequest* request,
                                                    v1::WaitStreamResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->WaitStream(session, DeviceOf(request->stream()), StreamOf(request->stream()),
                                DeviceOf(request->other()), StreamOf(request->other()));
  });
}

}  // namespace gpumux
