#include "server/rpc/profile_service.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "proto/profile_records.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {

absl::Status FillLiveProfile(DeviceProfiler& profiler, const SessionRegistry& sessions,
                             const v1::ProfileSessionRequest& request,
                             v1::ProfileSessionResponse* response) {
  if (request.session_id() == 0) {
    return absl::InvalidArgumentError("session_id 0 names no session");
  }
  GPUMUX_ASSIGN_OR_RETURN(SessionProfile live,
                          ProfileLiveSession(profiler, sessions, SessionId(request.session_id()),
                                             absl::Milliseconds(request.duration_ms()),
                                             request.capacity(), kHostProfileReplyTimeout));
  ToProto(live.device, response->mutable_device());
  if (live.host.has_value()) ToProto(*live.host, response->mutable_host());
  response->set_host_missing(live.host_missing);
  response->set_start_ns(live.start_ns);
  response->set_end_ns(live.end_ns);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ProfileService::Start(grpc::CallbackServerContext* context,
                                                const v1::StartProfileRequest* request,
                                                v1::StartProfileResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(const DeviceProfiler::Started started,
                            profiler_->Start(session, request->capacity()));
    response->set_profile_id(started.id);
    response->set_token(started.token);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ProfileService::Finish(grpc::CallbackServerContext* context,
                                                 const v1::FinishProfileRequest* request,
                                                 v1::DeviceProfileRecords* response) {
  // Blocks while the profiled work still queued completes.
  return ServeBlockingSessionCall(
      context, *sessions_, *executor_,
      [profiler = profiler_, request, response](SessionId session) -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(const DeviceProfile profile,
                                profiler->Finish(session, request->profile_id()));
        ToProto(profile, response);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ProfileService::ProfileSession(grpc::CallbackServerContext* context,
                                                         const v1::ProfileSessionRequest* request,
                                                         v1::ProfileSessionResponse* response) {
  return ServeBlockingSessionCall(
      context, *sessions_, *executor_,
      [profiler = profiler_, sessions = sessions_, request,
       response](SessionId caller) -> absl::Status {
        const std::optional<SessionRecord> me = sessions->Get(caller);
        const std::optional<SessionRecord> target = sessions->Get(SessionId(request->session_id()));
        if (me.has_value() && target.has_value() && me->tenant != target->tenant) {
          return absl::PermissionDeniedError(
              absl::StrCat("session ", request->session_id(), " belongs to tenant '",
                           target->tenant, "' and this session to tenant '", me->tenant,
                           "': a session profiles only its own tenant's sessions; an administrator "
                           "profiles any (Admin.ProfileSession, on the admin socket)"));
        }
        return FillLiveProfile(*profiler, *sessions, *request, response);
      });
}

}  // namespace gpumux
