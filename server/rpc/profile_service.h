#pragma once

// gpumux.v1.Profile: profiles a session owns (`gpumux bottleneck`: Start,
// Finish) and windows on live sessions of the caller's tenant (`gpumux
// profile`: ProfileSession), over the core's DeviceProfiler and
// ProfileLiveSession. Admin.ProfileSession shares FillLiveProfile.

#include "gpumux/v1/profile.grpc.pb.h"
#include "server/core/device_profiler.h"
#include "server/core/live_profile.h"
#include "server/core/session_registry.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

// How long a client has to send its host side after StopProfiling.
inline constexpr absl::Duration kHostProfileReplyTimeout = absl::Seconds(5);

// Runs ProfileLiveSession for `request` and writes the response.
absl::Status FillLiveProfile(DeviceProfiler& profiler, const SessionRegistry& sessions,
                             const v1::ProfileSessionRequest& request,
                             v1::ProfileSessionResponse* response);

class ProfileService final : public v1::Profile::CallbackService {
 public:
  // All must outlive the service.
  ProfileService(DeviceProfiler* profiler, const SessionRegistry* sessions,
                 BlockingExecutor* executor)
      : profiler_(profiler), sessions_(sessions), executor_(executor) {}

  grpc::ServerUnaryReactor* Start(grpc::CallbackServerContext* context,
                                  const v1::StartProfileRequest* request,
                                  v1::StartProfileResponse* response) override;
  grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                   const v1::FinishProfileRequest* request,
                                   v1::DeviceProfileRecords* response) override;
  grpc::ServerUnaryReactor* ProfileSession(grpc::CallbackServerContext* context,
                                           const v1::ProfileSessionRequest* request,
                                           v1::ProfileSessionResponse* response) override;

 private:
  DeviceProfiler* profiler_;
  const SessionRegistry* sessions_;
  BlockingExecutor* executor_;
};

}  // namespace gpumux
