#include "server/rpc/nvtx_service.h"

#include "common/base/status_macros.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {

grpc::ServerUnaryReactor* NvtxService::Mark(grpc::CallbackServerContext* context,
                                            const v1::NvtxMessage* request,
                                            v1::NvtxMarkResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return ranges_->Mark(session, request->thread(), request->message());
  });
}

grpc::ServerUnaryReactor* NvtxService::RangePush(grpc::CallbackServerContext* context,
                                                 const v1::NvtxMessage* request,
                                                 v1::NvtxDepth* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(int depth,
                            ranges_->Push(session, request->thread(), request->message()));
    if (profiler_ != nullptr) {
      profiler_->RangePushed(session, request->thread(), request->message(), depth);
    }
    response->set_depth(depth);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* NvtxService::RangePop(grpc::CallbackServerContext* context,
                                                const v1::NvtxRangePopRequest* request,
                                                v1::NvtxDepth* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(int depth, ranges_->Pop(session, request->thread()));
    if (profiler_ != nullptr) profiler_->RangePopped(session, request->thread(), depth);
    response->set_depth(depth);
    return absl::OkStatus();
  });
}

}  // namespace gpumux
