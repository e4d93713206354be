#include "gpumux/event.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

absl::Status NoClientError() {
  return absl::FailedPreconditionError("the Event is empty: it belongs to no Client");
}

}  // namespace

Event::Event(Client& client, const EventOptions& options) : client_(&client), options_(options) {}

Event::Event(Client* client, const EventOptions& options, DeviceIndex device, uint64_t id,
             std::string ipc_handle)
    : client_(client),
      options_(options),
      device_(device),
      id_(id),
      ipc_handle_(std::move(ipc_handle)) {}

Event::Event(Event&& other) noexcept
    : client_(std::exchange(other.client_, nullptr)),
      options_(other.options_),
      device_(other.device_),
      id_(std::exchange(other.id_, 0)),
      ipc_handle_(std::move(other.ipc_handle_)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this == &other) return *this;
  Reset();
  client_ = std::exchange(other.client_, nullptr);
  options_ = other.options_;
  device_ = other.device_;
  id_ = std::exchange(other.id_, 0);
  ipc_handle_ = std::move(other.ipc_handle_);
  return *this;
}

Event::~Event() { Reset(); }

std::optional<DeviceIndex> Event::device() const {
  if (!created()) return std::nullopt;
  return device_;
}

void Event::Reset() {
  if (client_ != nullptr && id_ != 0 && !client_->session_ended()) {
    v1::EventRequest request;
    request.set_event(id_);
    v1::DestroyEventResponse response;
    absl::Status status = client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
      return client_->impl_->event_stub_->Destroy(context, request, &response);
    });
    // The session may have ended meanwhile; the daemon then released it.
    if (!status.ok() && !absl::IsUnavailable(status)) {
      spdlog::warn("gpumux: destroying event {} failed: {}", id_, status.ToString());
    }
  }
  client_ = nullptr;
  id_ = 0;
  ipc_handle_.clear();
}

absl::Status Event::CreateOn(DeviceIndex device) {
  if (client_ == nullptr) return NoClientError();
  v1::CreateEventRequest request;
  request.set_device(device.value());
  request.set_enable_timing(options_.enable_timing);
  request.set_blocking(options_.blocking);
  request.set_interprocess(options_.interprocess);
  v1::CreateEventResponse response;
  GPUMUX_RETURN_IF_ERROR(client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->event_stub_->Create(context, request, &response);
  }));
  id_ = response.event();
  device_ = DeviceIndex(response.device());
  return absl::OkStatus();
}

absl::Status Event::Record() {
  GPUMUX_PROFILED("Event::Record");
  if (client_ == nullptr) return NoClientError();
  return Record(client_->CurrentStream());
}

absl::Status Event::Record(const Stream& stream) {
  GPUMUX_PROFILED("Event::Record");
  if (client_ == nullptr) return NoClientError();
  if (stream.client() != client_) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", ToString(stream.id()), " of device ",
                                                   stream.device().value(),
                                                   " belongs to another Client"));
  }
  if (!created()) GPUMUX_RETURN_IF_ERROR(CreateOn(stream.device()));
  v1::RecordEventRequest request;
  request.set_event(id_);
  *request.mutable_stream() = ToProto(stream);
  v1::RecordEventResponse response;
  return client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->event_stub_->Record(context, request, &response);
  });
}

absl::StatusOr<bool> Event::Query() const {
  GPUMUX_PROFILED("Event::Query");
  if (!created()) return true;
  v1::EventRequest request;
  request.set_event(id_);
  v1::QueryEventResponse response;
  GPUMUX_RETURN_IF_ERROR(client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->event_stub_->Query(context, request, &response);
  }));
  return response.done();
}

absl::Status Event::Synchronize() const {
  GPUMUX_PROFILED_WAIT("Event::Synchronize");
  if (!created()) return absl::OkStatus();
  v1::EventRequest request;
  request.set_event(id_);
  v1::SynchronizeEventResponse response;
  return client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->event_stub_->Synchronize(context, request, &response);
  });
}

absl::Status Event::Wait() const {
  GPUMUX_PROFILED("Event::Wait");
  if (!created()) return absl::OkStatus();
  return Wait(client_->CurrentStream());
}

absl::Status Event::Wait(const Stream& stream) const { return stream.WaitEvent(*this); }

absl::StatusOr<float> Event::ElapsedTime(const Event& end) const {
  GPUMUX_PROFILED("Event::Wait");
  if (!created() || !end.created()) {
    return absl::FailedPreconditionError(
        "Both events must be recorded before calculating elapsed time.");
  }
  if (end.client_ != client_) {
    return absl::InvalidArgumentError(
        absl::StrCat("event ", end.id_, " belongs to another Client"));
  }
  v1::ElapsedTimeRequest request;
  request.set_start(id_);
  request.set_end(end.id_);
  v1::ElapsedTimeResponse response;
  GPUMUX_RETURN_IF_ERROR(client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->event_stub_->ElapsedTime(context, request, &response);
  }));
  return response.milliseconds();
}

absl::StatusOr<std::string> Event::IpcHandle() {
  GPUMUX_PROFILED("Event::IpcHandle");
  if (client_ == nullptr) return NoClientError();
  if (!ipc_handle_.empty()) return ipc_handle_;
  if (!created()) GPUMUX_RETURN_IF_ERROR(CreateOn(client_->CurrentDevice()));
  v1::EventRequest request;
  request.set_event(id_);
  v1::GetIpcHandleResponse response;
  GPUMUX_RETURN_IF_ERROR(client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->event_stub_->GetIpcHandle(context, request, &response);
  }));
  ipc_handle_ = std::move(*response.mutable_handle());
  return ipc_handle_;
}

}  // namespace gpumux
