#pragma once

// The shape of a collective's RPC (gpumux.v1.Comm, gpumux.v1.Group): the
// session's call with its CommOptions converted, the core's CommDone written
// into the CommResponse.

#include <utility>

#include "common/base/status_macros.h"
#include "gpumux/v1/comm.pb.h"
#include "server/core/comm_work.h"
#include "server/rpc/comm_proto.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {

// Runs `call(session, options)` (returning absl::StatusOr<CommDone>), on the
// blocking executor when `blocking` or the options wait, and writes its
// results. `proto_options` and `response` must outlive the call (they are
// the request's and the reply's).
template <typename Call>
grpc::ServerUnaryReactor* ServeCollective(grpc::CallbackServerContext* context,
                                          const SessionRegistry& sessions,
                                          BlockingExecutor& executor,
                                          const v1::CommOptions& proto_options, bool blocking,
                                          v1::CommResponse* response, Call call) {
  return ServeSessionCallBlockingIf(
      blocking || proto_options.wait(), context, sessions, executor,
      [&proto_options, response, call = std::move(call)](SessionId session) -> absl::Status {
        GPUMUX_ASSIGN_OR_RETURN(const CommOptions options, FromProto(proto_options));
        GPUMUX_ASSIGN_OR_RETURN(const CommDone done, call(session, options));
        ToProto(done, response);
        return absl::OkStatus();
      });
}

}  // namespace gpumux
