#include "server/rpc/stream_service.h"

#include <string>
#include <utility>

#include "common/status_macros.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {
namespace {

DeviceIndex Device(const v1::StreamRef& ref) { return DeviceIndex(ref.device()); }
StreamId Stream(const v1::StreamRef& ref) { return StreamId(ref.stream()); }

// A synchronize: answered on the gRPC thread when `query(session)` says the
// work is done (or fails), else `wait(session)` runs on the executor.
template <typename Query, typename Wait>
grpc::ServerUnaryReactor* ServeSynchronize(grpc::CallbackServerContext* context, const SessionRegistry& sessions,
                                           BlockingExecutor& executor, Query query, Wait wait) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<SessionId> session = AuthenticateCall(*context, sessions);
  absl::StatusOr<bool> done = session.ok() ? query(*session) : session.status();
  if (!done.ok() || *done) {
    reactor->Finish(FinishStatus(sessions, done.status()));
    return reactor;
  }
  absl::Status started =
      executor.Run(session->value(), [reactor, &sessions, id = *session, wait = std::move(wait)]() mutable {
        reactor->Finish(FinishStatus(sessions, wait(id)));
      });
  if (!started.ok()) reactor->Finish(FinishStatus(sessions, started));  // the task was dropped unrun
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* StreamService::GetPriorityRange(grpc::CallbackServerContext* context,
                                                          const v1::GetPriorityRangeRequest* request,
                                                          v1::GetPriorityRangeResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(StreamPriorityRange range, streams_->PriorityRange(DeviceIndex(request->device())));
    response->set_least(range.least);
    response->set_greatest(range.greatest);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* StreamService::Create(grpc::CallbackServerContext* context,
                                                const v1::CreateStreamRequest* request,
                                                v1::CreateStreamResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(StreamManager::CreatedStream created,
                            streams_->CreateStream(session, DeviceIndex(request->device()), request->priority()));
    response->set_stream(created.id.value());
    response->set_device(request->device());
    response->set_priority(created.priority);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* StreamService::Destroy(grpc::CallbackServerContext* context,
                                                 const v1::DestroyStreamRequest* request,
                                                 v1::DestroyStreamResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->DestroyStream(session, Device(request->stream()), Stream(request->stream()));
  });
}

grpc::ServerUnaryReactor* StreamService::Query(grpc::CallbackServerContext* context, const v1::StreamRequest* request,
                                               v1::QueryStreamResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(bool done,
                            streams_->QueryStream(session, Device(request->stream()), Stream(request->stream())));
    response->set_done(done);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* StreamService::Synchronize(grpc::CallbackServerContext* context,
                                                     const v1::StreamRequest* request,
                                                     v1::SynchronizeStreamResponse* /*response*/) {
  const DeviceIndex device = Device(request->stream());
  const StreamId stream = Stream(request->stream());
  return ServeSynchronize(
      context, *sessions_, *executor_,
      [&](SessionId session) { return streams_->QueryStream(session, device, stream); },
      [streams = streams_, device, stream](SessionId session) {
        return streams->SynchronizeStream(session, device, stream);
      });
}

grpc::ServerUnaryReactor* StreamService::WaitEvent(grpc::CallbackServerContext* context,
                                                   const v1::WaitEventRequest* request,
                                                   v1::WaitEventResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->WaitEvent(session, Device(request->stream()), Stream(request->stream()),
                               EventId(request->event()));
  });
}

grpc::ServerUnaryReactor* StreamService::WaitStream(grpc::CallbackServerContext* context,
                                                    const v1::WaitStreamRequest* request,
                                                    v1::WaitStreamResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->WaitStream(session, Device(request->stream()), Stream(request->stream()),
                                Device(request->other()), Stream(request->other()));
  });
}

grpc::ServerUnaryReactor* EventService::Create(grpc::CallbackServerContext* context,
                                               const v1::CreateEventRequest* request,
                                               v1::CreateEventResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    EventFlags flags{request->enable_timing(), request->blocking(), request->interprocess()};
    GPUMUX_ASSIGN_OR_RETURN(EventView event, streams_->CreateEvent(session, DeviceIndex(request->device()), flags));
    response->set_event(event.id.value());
    response->set_device(event.device.value());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EventService::Destroy(grpc::CallbackServerContext* context, const v1::EventRequest* request,
                                                v1::DestroyEventResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_,
                          [&](SessionId session) { return streams_->DestroyEvent(session, EventId(request->event())); });
}

grpc::ServerUnaryReactor* EventService::Record(grpc::CallbackServerContext* context,
                                               const v1::RecordEventRequest* request,
                                               v1::RecordEventResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return streams_->RecordEvent(session, EventId(request->event()), Device(request->stream()),
                                 Stream(request->stream()));
  });
}

grpc::ServerUnaryReactor* EventService::Query(grpc::CallbackServerContext* context, const v1::EventRequest* request,
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
      context, *sessions_, *executor_, [&](SessionId session) { return streams_->QueryEvent(session, event); },
      [streams = streams_, event](SessionId session) { return streams->SynchronizeEvent(session, event); });
}

grpc::ServerUnaryReactor* EventService::ElapsedTime(grpc::CallbackServerContext* context,
                                                    const v1::ElapsedTimeRequest* request,
                                                    v1::ElapsedTimeResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(float ms,
                            streams_->ElapsedTimeMs(session, EventId(request->start()), EventId(request->end())));
    response->set_milliseconds(ms);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EventService::GetIpcHandle(grpc::CallbackServerContext* context,
                                                     const v1::EventRequest* request,
                                                     v1::GetIpcHandleResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(std::string handle, streams_->IpcHandle(session, EventId(request->event())));
    response->set_handle(std::move(handle));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EventService::OpenIpcHandle(grpc::CallbackServerContext* context,
                                                      const v1::OpenIpcHandleRequest* request,
                                                      v1::CreateEventResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(EventView event,
                            streams_->OpenIpcHandle(session, DeviceIndex(request->device()), request->handle()));
    response->set_event(event.id.value());
    response->set_device(event.device.value());
    return absl::OkStatus();
  });
}

}  // namespace gpumux
