#include "server/rpc/copy_service.h"

#include <string>

#include "common/base/status_macros.h"
#include "server/rpc/copy_proto.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {

grpc::ServerUnaryReactor* CopyService::GetStagingBuffer(grpc::CallbackServerContext* context,
                                                        const v1::GetStagingBufferRequest* request,
                                                        v1::StagingBuffer* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(StagingBufferInfo info, staging_->Get(session, request->min_size()));
    ToProto(info, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CopyService::DeviceToDevice(grpc::CallbackServerContext* context,
                                                      const v1::DeviceToDeviceRequest* request,
                                                      v1::CopyResponse* response) {
  // Without a session the call fails at once, wherever it runs.
  absl::StatusOr<SessionId> caller = AuthenticateCall(*context, *sessions_);
  const bool blocking = caller.ok() && work_->DeviceToDeviceWaits(
                                           *caller, AllocationId(request->dst().allocation_id()),
                                           AllocationId(request->src().allocation_id()),
                                           FromProto(request->options()));
  return ServeSessionCallBlockingIf(
      blocking, context, *sessions_, *executor_,
      [work = work_, request, response](SessionId session) -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(
            WorkDone done,
            work->DeviceToDevice(session, FromProto(request->dst(), request->size()),
                                 AllocationId(request->src().allocation_id()),
                                 request->src().offset(), FromProto(request->options())));
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
            done =
                work->HostToDevice(session, dst, request->dst().offset(), request->data(), options);
            break;
          case v1::HostToDeviceRequest::kStaging:
            done = work->HostToDeviceFromStaging(
                session, FromProto(request->dst(), request->staging().size()),
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
  // DeviceWork::DeviceToHost (inline bytes) always waits for its copy.
  const bool blocking = request->options().wait() ||
                        request->destination_case() == v1::DeviceToHostRequest::kInlineSize;
  return ServeSessionCallBlockingIf(
      blocking, context, *sessions_, *executor_,
      [work = work_, request, response](SessionId session) -> absl::Status {
        const WorkOptions options = FromProto(request->options());
        absl::StatusOr<WorkDone> done;
        switch (request->destination_case()) {
          case v1::DeviceToHostRequest::kInlineSize:
            done = work->DeviceToHost(session, FromProto(request->src(), request->inline_size()),
                                      options, response->mutable_data());
            break;
          case v1::DeviceToHostRequest::kStaging:
            done = work->DeviceToHostIntoStaging(
                session, FromProto(request->src(), request->staging().size()),
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

grpc::ServerUnaryReactor* CopyService::Memset(grpc::CallbackServerContext* context,
                                              const v1::MemsetRequest* request,
                                              v1::CopyResponse* response) {
  return ServeSessionCallBlockingIf(
      request->options().wait(), context, *sessions_, *executor_,
      [work = work_, request, response](SessionId session) -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(WorkDone done,
                                work->Memset(session, FromProto(request->dst(), request->size()),
                                             request->value(), FromProto(request->options())));
        SetCompletionEvent(done, response);
        return absl::OkStatus();
      });
}

}  // namespace gpumux
