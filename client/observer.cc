#include "gpumux/observer.h"

#include <chrono>
#include <utility>

#include "client/channel.h"
#include "client/grpc_status.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/group.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace gpumux {

constexpr auto kObserveCallTimeout = std::chrono::seconds(30);

class Observer::Impl {
 public:
  Impl(absl::string_view address, const ChannelSecurity& security)
      : address_(address), channel_(CreateDaemonChannel(address, security)) {
    if (channel_.ok()) {
      device_stub_ = v1::Device::NewStub(*channel_);
      observe_stub_ = v1::Observe::NewStub(*channel_);
      group_stub_ = v1::Group::NewStub(*channel_);
    }
  }

  // Runs `call(context)` with the deadline; the status as FromGrpcStatus
  // makes it, or the channel's failure.
  template <typename Call>
  absl::Status CallDaemon(Call call) {
    if (!channel_.ok()) return channel_.status();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kObserveCallTimeout);
    return FromGrpcStatus(call(&context), address_);
  }

  const std::string address_;
  const absl::StatusOr<std::shared_ptr<grpc::Channel>> channel_;
  // Null when channel_ failed.
  std::unique_ptr<v1::Device::Stub> device_stub_;
  std::unique_ptr<v1::Observe::Stub> observe_stub_;
  std::unique_ptr<v1::Group::Stub> group_stub_;
};

Observer::Observer(absl::string_view address, const ChannelSecurity& security)
    : impl_(std::make_unique<Impl>(address, security)) {}
Observer::~Observer() = default;

const std::string& Observer::address() const { return impl_->address_; }

absl::StatusOr<std::vector<DeviceProperties>> Observer::ListDevices() {
  v1::ListDevicesResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->device_stub_->ListDevices(context, v1::ListDevicesRequest(), &response);
  }));
  std::vector<DeviceProperties> devices;
  devices.reserve(response.devices_size());
  for (const v1::DeviceProperties& device : response.devices())
    devices.push_back(FromProto(device));
  return devices;
}

absl::StatusOr<std::vector<SessionInfo>> Observer::ListSessions() {
  v1::ListSessionsResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->observe_stub_->ListSessions(context, v1::ListSessionsRequest(), &response);
  }));
  std::vector<SessionInfo> sessions;
  sessions.reserve(response.sessions_size());
  for (const v1::SessionInfo& session : response.sessions()) sessions.push_back(FromProto(session));
  return sessions;
}

absl::StatusOr<std::vector<DaemonGroupInfo>> Observer::ListGroups() {
  v1::ListGroupsResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->group_stub_->ListGroups(context, v1::ListGroupsRequest(), &response);
  }));
  std::vector<DaemonGroupInfo> groups;
  groups.reserve(response.groups_size());
  for (const v1::GroupInfo& group : response.groups()) groups.push_back(FromProto(group));
  return groups;
}

absl::StatusOr<std::map<std::string, int64_t>> Observer::MemoryStats(
    DeviceIndex device, std::optional<SessionId> session) {
  v1::ObserveStatsRequest request;
  request.set_device(device.value());
  request.set_session_id(session.value_or(SessionId(0)).value());
  v1::MemoryStats response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->observe_stub_->GetMemoryStats(context, request, &response);
  }));
  return FromProto(response);
}

absl::StatusOr<std::string> Observer::MemorySummary(DeviceIndex device,
                                                    std::optional<SessionId> session,
                                                    bool abbreviated) {
  v1::ObserveSummaryRequest request;
  request.set_device(device.value());
  request.set_session_id(session.value_or(SessionId(0)).value());
  request.set_abbreviated(abbreviated);
  v1::MemorySummary response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->observe_stub_->GetMemorySummary(context, request, &response);
  }));
  return std::move(*response.mutable_text());
}

absl::StatusOr<std::vector<SegmentInfo>> Observer::MemorySnapshot(
    std::optional<DeviceIndex> device, std::optional<SessionId> session) {
  v1::ObserveSnapshotRequest request;
  request.set_device(device.value_or(DeviceIndex(0)).value());
  request.set_all_devices(!device.has_value());
  request.set_session_id(session.value_or(SessionId(0)).value());
  v1::MemorySnapshot response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallDaemon([&](grpc::ClientContext* context) {
    return impl_->observe_stub_->GetMemorySnapshot(context, request, &response);
  }));
  return FromProto(response);
}

}  // namespace gpumux
