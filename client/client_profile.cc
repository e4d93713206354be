// Client's profiles: the Profile service (`gpumux bottleneck`, `gpumux profile`).

#include "client/client.h"
#include "client/client_impl.h"
#include "common/status_macros.h"
#include "proto/profile_records.h"

namespace gpumux {

absl::StatusOr<Client::StartedProfile> Client::StartProfile(uint64_t capacity) {
  v1::StartProfileRequest request;
  request.set_capacity(capacity);
  v1::StartProfileResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->profile_stub_->Start(context, request, &response);
  }));
  return StartedProfile{response.profile_id(), response.token()};
}

absl::StatusOr<DeviceProfile> Client::FinishProfile(uint64_t id) {
  v1::FinishProfileRequest request;
  request.set_profile_id(id);
  v1::DeviceProfileRecords response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->profile_stub_->Finish(context, request, &response);
  }));
  return FromProto(response);
}

absl::StatusOr<SessionProfile> Client::ProfileSession(SessionId session, absl::Duration duration,
                                                      uint64_t capacity) {
  const v1::ProfileSessionRequest request = ProfileSessionRequestOf(session, duration, capacity);
  v1::ProfileSessionResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->profile_stub_->ProfileSession(context, request, &response);
  }));
  return FromProto(response);
}

}  // namespace gpumux
