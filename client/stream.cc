#include "gpumux/stream.h"

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "gpumux/event.h"

namespace gpumux {

absl::StatusOr<bool> Stream::Query() const {
  GPUMUX_PROFILED("Stream::Query");
  v1::StreamRequest request;
  *request.mutable_stream() = ToProto(*this);
  v1::QueryStreamResponse response;
  GPUMUX_RETURN_IF_ERROR(client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->stream_stub_->Query(context, request, &response);
  }));
  return response.done();
}

absl::Status Stream::Synchronize() const {
  GPUMUX_PROFILED_WAIT("Stream::Synchronize");
  v1::StreamRequest request;
  *request.mutable_stream() = ToProto(*this);
  v1::SynchronizeStreamResponse response;
  return client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->stream_stub_->Synchronize(context, request, &response);
  });
}

absl::Status Stream::WaitEvent(const Event& event) const {
  GPUMUX_PROFILED("Stream::WaitEvent");
  if (!event.created()) return absl::OkStatus();  // never recorded: no wait
  if (event.client() != client_) {
    return absl::InvalidArgumentError(
        absl::StrCat("event ", event.id(), " belongs to another Client"));
  }
  v1::WaitEventRequest request;
  *request.mutable_stream() = ToProto(*this);
  request.set_event(event.id());
  v1::WaitEventResponse response;
  return client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->stream_stub_->WaitEvent(context, request, &response);
  });
}

absl::Status Stream::WaitStream(const Stream& other) const {
  GPUMUX_PROFILED("Stream::WaitStream");
  if (other.client_ != client_) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", ToString(other.id_), " of device ",
                                                   other.device_.value(),
                                                   " belongs to another Client"));
  }
  v1::WaitStreamRequest request;
  *request.mutable_stream() = ToProto(*this);
  *request.mutable_other() = ToProto(other);
  v1::WaitStreamResponse response;
  return client_->impl_->CallWithSession([&](grpc::ClientContext* context) {
    return client_->impl_->stream_stub_->WaitStream(context, request, &response);
  });
}

absl::StatusOr<Event> Stream::RecordEvent() const {
  GPUMUX_PROFILED("Stream::RecordEvent");
  Event event(*client_);
  GPUMUX_RETURN_IF_ERROR(event.Record(*this));
  return event;
}

absl::Status Stream::RecordEvent(Event& event) const { return event.Record(*this); }

}  // namespace gpumux
