// Client's profiles: the Profile service (`gpumux bottleneck`, `gpumux profile`).

#include "client/client_impl.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "gpumux/profiler.h"
#include "proto/profile_records.h"

namespace gpumux {

absl::StatusOr<profiler::StartedProfile> profiler::Start(Client& client, uint64_t capacity) {
  auto& impl = ImplOf(client);
  v1::StartProfileRequest request;
  request.set_capacity(capacity);
  v1::StartProfileResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.profile_stub_->Start(context, request, &response);
  }));
  return StartedProfile{response.profile_id(), response.token()};
}

absl::StatusOr<DeviceProfile> profiler::Finish(Client& client, uint64_t id) {
  auto& impl = ImplOf(client);
  v1::FinishProfileRequest request;
  request.set_profile_id(id);
  v1::DeviceProfileRecords response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.profile_stub_->Finish(context, request, &response);
  }));
  return FromProto(response);
}

absl::StatusOr<SessionProfile> profiler::ProfileSession(Client& client, SessionId session,
                                                        absl::Duration duration,
                                                        uint64_t capacity) {
  auto& impl = ImplOf(client);
  const v1::ProfileSessionRequest request = ProfileSessionRequestOf(session, duration, capacity);
  v1::ProfileSessionResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.profile_stub_->ProfileSession(context, request, &response);
  }));
  return FromProto(response);
}

}  // namespace gpumux
