#include "server/rpc/event_service.h"

#include <string>
#include <utility>

#include "common/base/status_macros.h"
#include "server/rpc/event_proto.h"
#include "server/rpc/serve_session_call.h"
#include "server/rpc/stream_proto.h"

namespace gpumux {

grpc::ServerUnaryReactor* EventService::Create(grpc::CallbackServerContext* context,
                                               const v1::CreateEventRequest* request,
                                               v1::CreateEventResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(
        EventView event,
        streams_->CreateEvent(session, DeviceIndex(request->device()), FromProto(*request)));
    ToProto(event, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EventService::Destroy(grpc::CallbackServerContext* context,
                                                const v1::EventRequest* request,
                                                v1::DestroyEventResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->DestroyEvent(session, EventId(request->event()));
  });
}

grpc::ServerUnaryReactor* EventService::Record(grpc::CallbackServerContext* context,
                                               const v1::RecordEventRequest* request,
                                               v1::RecordEventResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->RecordEvent(session, EventId(request->event()), DeviceOf(request->stream()),
                                 StreamOf(request->stream()));
  });
}

grpc::ServerUnaryReactor* EventService::Query(grpc::CallbackServerContext* context,
                                              const v1::EventRequest* request,
                                              v1::QueryEventResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(bool done, streams_->QueryEvent(session, EventId(request->event())));
    response->set_done(done);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EventService::Synchronize(grpc::CallbackServerContext* context,
                                                    const v1::EventRequest* request,
                                                    v1::SynchronizeEventResponse* /*response*/) {
  const EventId event(request->event());
  return ServeSynchronize(
      context, *sessions_, *executor_,
      [&](SessionId session) { return streams_->TrySynchronizeEvent(session, event); },
      [streams = streams_, event](SessionId session) {
        return streams->SynchronizeEvent(session, event);
      });
}

grpc::ServerUnaryReactor* EventService::ElapsedTime(grpc::CallbackServerContext* context,
                                                    const v1::ElapsedTimeRequest* request,
                                                    v1::ElapsedTimeResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(float ms, streams_->ElapsedTimeMs(session, EventId(request->start()),
                                                              EventId(request->end())));
    response->set_milliseconds(ms);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EventService::GetIpcHandle(grpc::CallbackServerContext* context,
                                                     const v1::EventRequest* request,
                                                     v1::GetIpcHandleResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(std::string handle,
                            streams_->IpcHandle(session, EventId(request->event())));
    response->set_handle(std::move(handle));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EventService::OpenIpcHandle(grpc::CallbackServerContext* context,
                                                      const v1::OpenIpcHandleRequest* request,
                                                      v1::CreateEventResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(
        EventView event,
        streams_->OpenIpcHandle(session, DeviceIndex(request->device()), request->handle()));
    ToProto(event, response);
    return absl::OkStatus();
  });
}

}  // namespace gpumux
