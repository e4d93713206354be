#pragma once

// gpumux.v1.Session: the long-lived Open stream that is a session's life, and
// Ping. One reactor per stream; when the stream ends for any reason (the
// client half-closes, crashes or is killed, or the server shuts down) the
// session is closed and everything it held is released. Conversion lives in
// session_proto.h.

#include "absl/strings/string_view.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "server/core/client_queries.h"
#include "server/core/session_lifecycle.h"
#include "server/core/session_registry.h"

namespace gpumux {

class SessionService final : public v1::Session::CallbackService {
 public:
  // All must outlive the service. Clients' answers go to `queries`, their
  // host profiles to `profiler` (may be null: none are asked for).
  // Every SessionOpened names the backend, this daemon's version and its
  // allocator configuration (what a client's own allocator runs with).
  SessionService(SessionLifecycle* lifecycle, const SessionRegistry* sessions,
                 ClientQueries* queries, absl::string_view backend_name,
                 absl::string_view allocator_conf, DeviceProfiler* profiler = nullptr);

  grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>* Open(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse* response) override;

 private:
  SessionLifecycle* lifecycle_;
  const SessionRegistry* sessions_;
  ClientQueries* queries_;
  DeviceProfiler* profiler_;
  v1::SessionOpened daemon_;  // the fields every session's SessionOpened shares
};

}  // namespace gpumux
