// Client's current device and streams, its stream and event factories
// (torch.cuda.Stream, torch.cuda.Event); the handles' own calls are in
// stream.cc and event.cc.

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"

namespace gpumux {

absl::StatusOr<int> Client::Impl::CachedDeviceCount() {
  {
    absl::MutexLock lock(&device_count_mu_);
    if (device_count_.has_value()) return *device_count_;
  }
  // A daemon's device count never changes; two threads asking at once
  // store the same answer.
  GPUMUX_ASSIGN_OR_RETURN(int count, self_.DeviceCount());
  absl::MutexLock lock(&device_count_mu_);
  device_count_ = count;
  return count;
}

absl::Status Client::SetDevice(DeviceIndex device) {
  GPUMUX_PROFILED("Client::SetDevice");
  if (device.value() < 0) return absl::OkStatus();  // torch.cuda.set_device(-1)
  GPUMUX_ASSIGN_OR_RETURN(int count, impl_->CachedDeviceCount());
  if (device.value() >= count) {
    return absl::InvalidArgumentError(absl::StrCat("device ", device.value(),
                                                   " is out of range: this daemon has ", count,
                                                   " devices (0..", count - 1, ")"));
  }
  impl_->current_.set_device(device);
  return absl::OkStatus();
}

Stream Client::CurrentStream(std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("Client::CurrentStream");
  const DeviceIndex on = device.value_or(impl_->current_.device());
  const CurrentStreams::Entry entry = impl_->current_.stream(on);
  return Stream(*this, on, entry.id, entry.priority);
}

absl::Status Client::SetStream(const Stream& stream) {
  GPUMUX_PROFILED("Client::SetStream");
  if (stream.client() != this) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", ToString(stream.id()), " of device ",
                                                   stream.device().value(),
                                                   " belongs to another Client"));
  }
  impl_->current_.set_stream(stream.device(), {stream.id(), stream.priority()});
  impl_->current_.set_device(stream.device());
  return absl::OkStatus();
}

absl::StatusOr<Stream> Client::Impl::ResolveStream(const std::optional<Stream>& stream,
                                                   DeviceIndex device, absl::string_view what) {
  if (!stream.has_value()) return self_.CurrentStream(device);
  if (stream->client() != &self_) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", ToString(stream->id()), " of device ",
                                                   stream->device().value(),
                                                   " belongs to another Client"));
  }
  // Also for default streams: id 0 on the wire means the default stream of
  // the device the work runs on, whatever the caller meant.
  if (stream->device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream ", ToString(stream->id()), " is on device ", stream->device().value(), ", but ",
        what, " is on device ", device.value(), "; use a stream of device ", device.value()));
  }
  return *stream;
}

absl::StatusOr<StreamPriorities> Client::GetStreamPriorityRange(DeviceIndex device) {
  GPUMUX_PROFILED("Client::GetStreamPriorityRange");
  v1::GetPriorityRangeRequest request;
  request.set_device(device.value());
  v1::GetPriorityRangeResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->stream_stub_->GetPriorityRange(context, request, &response);
  }));
  StreamPriorities priorities;
  priorities.least = response.least();
  priorities.greatest = response.greatest();
  return priorities;
}

absl::StatusOr<Stream> Client::CreateStream(DeviceIndex device, int priority) {
  GPUMUX_PROFILED("Client::CreateStream");
  if (device.value() < 0) device = impl_->current_.device();  // torch.cuda.Stream(-1)
  v1::CreateStreamRequest request;
  request.set_device(device.value());
  request.set_priority(priority);
  v1::CreateStreamResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->stream_stub_->Create(context, request, &response);
  }));
  {
    absl::MutexLock lock(&impl_->streams_mu_);
    impl_->created_streams_[StreamId(response.stream())] = DeviceIndex(response.device());
  }
  return Stream(*this, DeviceIndex(response.device()), StreamId(response.stream()),
                response.priority());
}

absl::Status Client::DestroyStream(const Stream& stream) {
  GPUMUX_PROFILED("Client::DestroyStream");
  if (stream.client() != this) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", ToString(stream.id()), " of device ",
                                                   stream.device().value(),
                                                   " belongs to another Client"));
  }
  v1::DestroyStreamRequest request;
  *request.mutable_stream() = ToProto(stream);
  v1::DestroyStreamResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->stream_stub_->Destroy(context, request, &response);
  }));
  absl::MutexLock lock(&impl_->streams_mu_);
  impl_->created_streams_.erase(stream.id());
  return absl::OkStatus();
}

absl::Status Client::Impl::CheckKnownStream(const Stream& stream) const {
  if (stream.id() == StreamId(0)) return absl::OkStatus();  // a default stream
  absl::MutexLock lock(&streams_mu_);
  auto it = created_streams_.find(stream.id());
  if (it == created_streams_.end()) {
    return absl::NotFoundError(absl::StrCat("stream ", ToString(stream.id()),
                                            " not found: it is not a stream of this session"));
  }
  if (it->second != stream.device()) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", ToString(stream.id()),
                                                   " is on device ", it->second.value(),
                                                   ", not device ", stream.device().value()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Event> Client::CreateEvent(DeviceIndex device, const EventOptions& options) {
  GPUMUX_PROFILED("Client::CreateEvent");
  Event event(*this, options);
  GPUMUX_RETURN_IF_ERROR(event.CreateOn(device));
  return event;
}

absl::StatusOr<Event> Client::OpenEventIpcHandle(DeviceIndex device, absl::string_view handle) {
  GPUMUX_PROFILED("Client::OpenEventIpcHandle");
  if (handle.size() != kEventIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cudaIpcEventHandle_t expects byte-like object of size ", kEventIpcHandleBytes,
                     ", but got ", handle.size()));
  }
  v1::OpenIpcHandleRequest request;
  request.set_device(device.value());
  request.set_handle(std::string(handle));
  v1::CreateEventResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->event_stub_->OpenIpcHandle(context, request, &response);
  }));
  EventOptions options;
  options.interprocess = true;
  return Event(this, options, DeviceIndex(response.device()), response.event(),
               std::string(handle));
}

Event Client::Impl::AdoptCompletionEvent(DeviceIndex device, uint64_t id, std::string ipc_handle) {
  if (id == 0) return Event();
  EventOptions options;
  options.interprocess = true;
  return Event(&self_, options, device, id, std::move(ipc_handle));
}

absl::StatusOr<std::unique_ptr<HostIpcEvent>> Client::MapIpcEvent(absl::string_view handle) {
  GPUMUX_PROFILED("Client::MapIpcEvent");
  if (backend() != "host") {
    return absl::FailedPreconditionError(
        absl::StrCat("only host-backend events map into a process; this daemon's backend is ",
                     backend(), " (open its handles with cudaIpcOpenEventHandle)"));
  }
  if (impl_->memory_files_ == nullptr) {
    return NoMemorySocketError();
  }
  GPUMUX_ASSIGN_OR_RETURN(std::string key, HostIpcEventKey(handle));
  GPUMUX_ASSIGN_OR_RETURN(SealedMemory memory,
                          impl_->memory_files_->Fetch(key, kHostIpcEventFileBytes));
  return HostIpcEvent::Adopt(std::move(memory), "gpumux-event");
}

}  // namespace gpumux
