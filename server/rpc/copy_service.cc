#include "server/rpc/copy_service.h"

#include <string>

#include "common/status_macros.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {
namespace {

RangeUse Range(const v1::DeviceRange& range, uint64_t size) {
  return RangeUse{AllocationId(range.allocation_id()), range.offset(), size};
}

}  // namespace

WorkOptions FromProto(const v1::CopyOptions& options) {
  return WorkOptions{StreamId(options.stream()), options.wait(), options.completion_event()};
}

grpc::ServerUnaryReactor* CopyService::GetStagingBuffer(grpc::CallbackServerContext* context,
                                                        const v1::GetStagingBufferRequest* request,
                                                        v1::StagingBuffer* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(StagingBufferInfo info, staging_->Get(session, request->min_size()));
    response->mutable_handle()->set_kind(v1::HANDLE_KIND_HOST_MEMFD);
    response->mutable_handle()->set_data(info.key);
    response->set_size(info.size);
    response->set_pinned(info.pinned);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CopyService::DeviceToDevice(grpc::CallbackServerContext* context,
                                                      const v1::DeviceToDeviceRequest* request,
                                                      v1::CopyResponse* response) {
  // A copy across devices waits for itself (see DeviceWork), so it blocks.
  bool blocking = request->options().wait();
  if (!blocking) {
    absl::StatusOr<SessionId> session = AuthenticateCall(*context, *sessions_);
    if (session.ok()) {
      absl::StatusOr<AllocationView> dst = memory_->Lookup(*session, AllocationId(request->dst().allocation_id()));
      absl::StatusOr<AllocationView> src = memory_->Lookup(*session, AllocationId(request->src().allocation_id()));
      blocking = dst.ok() && src.ok() && dst->device != src->device;
    }
  }
  return ServeSessionCallBlockingIf(
      blocking, context, *sessions_, *executor_, [work = work_, request, response](SessionId session) -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(
            WorkDone done, work->DeviceToDevice(session, Range(request->dst(), request->size()),
                                                AllocationId(request->src().allocation_id()), request->src().offset(),
                                                FromProto(request->options())));
        SetCompletionEvent(done, response);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* CopyService::HostToDevice(grpc::CallbackServerContext* context,
                                                    const v1::HostToDeviceRequest* request,
                                                    v1::CopyResponse* response) {
  return ServeSessionCallBlockingIf(
      request->options().wait(), context, *sessions_, *executor_,
      [work = work_, request, response](SessionId session) -> absl::Status {
        const WorkOptions options = FromProto(request->options());
        AllocationId dst(request->dst().allocation_id());
        absl::StatusOr<WorkDone> done;
        switch (request->source_case()) {
          case v1::HostToDeviceRequest::kData:
            done = work->HostToDevice(session, dst, request->dst().offset(), request->data(), options);
            break;
          case v1::HostToDeviceRequest::kStaging:
            done = work->HostToDeviceFromStaging(session, Range(request->dst(), request->staging().size()),
                                                 request->staging().offset(), options);
            break;
          case v1::HostToDeviceRequest::SOURCE_NOT_SET:
            return absl::InvalidArgumentError("set the source: data or staging");
        }
        GPUMUX_RETURN_IF_ERROR(done.status());
        SetCompletionEvent(*done, response);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* CopyService::DeviceToHost(grpc::CallbackServerContext* context,
                                                    const v1::DeviceToHostRequest* request,
                                                    v1::DeviceToHostResponse* response) {
  const bool blocking =
      request->options().wait() || request->destination_case() == v1::DeviceToHostRequest::kInlineSize;
  return ServeSessionCallBlockingIf(
      blocking, context, *sessions_, *executor_, [work = work_, request, response](SessionId session) -> absl::Status {
        const WorkOptions options = FromProto(request->options());
        absl::StatusOr<WorkDone> done;
        switch (request->destination_case()) {
          case v1::DeviceToHostRequest::kInlineSize:
            done = work->DeviceToHost(session, Range(request->src(), request->inline_size()), options,
                                      response->mutable_data());
            break;
          case v1::DeviceToHostRequest::kStaging:
            done = work->DeviceToHostIntoStaging(session, Range(request->src(), request->staging().size()),
                                                 request->staging().offset(), options);
            break;
          case v1::DeviceToHostRequest::DESTINATION_NOT_SET:
            return absl::InvalidArgumentError("set the destination: inline_size or staging");
        }
        GPUMUX_RETURN_IF_ERROR(done.status());
        SetCompletionEvent(*done, response);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* CopyService::Memset(grpc::CallbackServerContext* context, const v1::MemsetRequest* request,
                                              v1::CopyResponse* response) {
  return ServeSessionCallBlockingIf(request->options().wait(), context, *sessions_, *executor_,
                                    [work = work_, request, response](SessionId session) -> absl::Status {
                                      GPUMUX_ASSIGN_OR_RETURN(
                                          WorkDone done, work->Memset(session, Range(request->dst(), request->size()),
                                                                      request->value(), FromProto(request->options())));
                                      SetCompletionEvent(done, response);
                                      return absl::OkStatus();
                                    });
}

}  // namespace gpumux
