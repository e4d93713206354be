#pragma once

// The shape of every unary RPC that acts for a session: authenticate the
// call, run the body for that session, finish with its status.

#include <utility>

#include "absl/status/statusor.h"
#include "gpumux/common/ids.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "server/core/device_profiler.h"
#include "server/core/session_registry.h"
#include "server/rpc/blocking_executor.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/session_auth.h"

namespace gpumux {

// A call that finishes while the daemon shuts down is answered UNAVAILABLE
// whatever it did: its session ends under it, so nothing it got or changed
// lasts, and a failure would otherwise read UNAUTHENTICATED or NOT_FOUND.
inline grpc::Status FinishStatus(const SessionRegistry& sessions, const absl::Status& status) {
  if (sessions.shutting_down()) return ToGrpcStatus(SessionRegistry::ShuttingDownError());
  return ToGrpcStatus(status);
}

// Runs `body(session)` (returning absl::Status) on the calling thread and
// finishes the call with its status; UNAUTHENTICATED without running it when
// the credentials are missing or wrong.
template <typename Body>
grpc::ServerUnaryReactor* ServeSessionCall(grpc::CallbackServerContext* context,
                                           const SessionRegistry& sessions, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<SessionId> session = AuthenticateCall(*context, sessions);
  DeviceProfiler::CallScope call(CallIdOf(*context));
  reactor->Finish(FinishStatus(sessions, session.ok() ? body(*session) : session.status()));
  return reactor;
}

// Runs `body(session)` on `executor` and finishes `reactor` with its status.
// Keyed by session, so one session's blocked calls never hold back another's.
// `call_id`: the client's call it serves (CallIdOf), for profiles.
template <typename Body>
void FinishOnExecutor(grpc::ServerUnaryReactor* reactor, const SessionRegistry& sessions,
                      BlockingExecutor& executor, SessionId session, Body body,
                      uint64_t call_id = 0) {
  absl::Status started = executor.Run(
      session.value(), [reactor, &sessions, session, call_id, body = std::move(body)]() mutable {
        DeviceProfiler::CallScope call(call_id);
        reactor->Finish(FinishStatus(sessions, body(session)));
      });
  if (!started.ok())
    reactor->Finish(FinishStatus(sessions, started));  // the task was dropped unrun
}

// As ServeSessionCall, but `body` runs on `executor`, for bodies that may
// block. `body` must capture by value: the handler's frame is gone when it
// runs (the request and response it points to live until Finish).
template <typename Body>
grpc::ServerUnaryReactor* ServeBlockingSessionCall(grpc::CallbackServerContext* context,
                                                   const SessionRegistry& sessions,
                                                   BlockingExecutor& executor, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<SessionId> session = AuthenticateCall(*context, sessions);
  if (!session.ok()) {
    reactor->Finish(ToGrpcStatus(session.status()));
    return reactor;
  }
  FinishOnExecutor(reactor, sessions, executor, *session, std::move(body), CallIdOf(*context));
  return reactor;
}

// ServeBlockingSessionCall when `blocking`, else ServeSessionCall.
template <typename Body>
grpc::ServerUnaryReactor* ServeSessionCallBlockingIf(bool blocking,
                                                     grpc::CallbackServerContext* context,
                                                     const SessionRegistry& sessions,
                                                     BlockingExecutor& executor, Body body) {
  if (blocking) return ServeBlockingSessionCall(context, sessions, executor, std::move(body));
  return ServeSessionCall(context, sessions, std::move(body));
}

// A synchronize: answered on the gRPC thread when `query(session)` (returning
// absl::StatusOr<bool>) says the work is done or fails, else `wait(session)`
// runs on `executor`. `wait` must capture by value, as for
// ServeBlockingSessionCall.
template <typename Query, typename Wait>
grpc::ServerUnaryReactor* ServeSynchronize(grpc::CallbackServerContext* context,
                                           const SessionRegistry& sessions,
                                           BlockingExecutor& executor, Query query, Wait wait) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<SessionId> session = AuthenticateCall(*context, sessions);
  absl::StatusOr<bool> done = session.ok() ? query(*session) : session.status();
  if (!done.ok() || *done) {
    reactor->Finish(FinishStatus(sessions, done.status()));
    return reactor;
  }
  FinishOnExecutor(reactor, sessions, executor, *session, std::move(wait), CallIdOf(*context));
  return reactor;
}

}  // namespace gpumux
