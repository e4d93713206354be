#pragma once

// RpcRecorder: what this process put on the wire. A global gRPC client
// interceptor, registered before main, hands every finished unary call of
// every channel to the recorder alive at the time, so that client tests can
// check the traffic between a real Client and a real daemon (which call
// carried which frees, how many Free calls a burst took) without a scripted
// stand-in. Recording changes no call. Thread-safe. Includes the request
// messages tests name (Requests<v1::MemsetRequest>).

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gpumux/common/ids.h"
#include "gpumux/v1/copy.pb.h"
#include "gpumux/v1/memory.pb.h"
#include "gpumux/v1/random.pb.h"
#include "gpumux/v1/stream.pb.h"
#include "grpcpp/support/status.h"

namespace gpumux::testing {

struct RecordedCall {
  // The full method name, e.g. "/gpumux.v1.Memory/Free".
  std::string method;
  // From the call's gpumux-session metadata; 0 without one.
  SessionId session;
  // The request as serialized.
  std::string request;
  // Memory/Allocate only: the allocation the daemon answered with, when it did.
  v1::Allocation allocation;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
};

class RpcRecorder {
 public:
  // Records from now until destroyed. At most one recorder lives at a time.
  RpcRecorder();
  ~RpcRecorder();
  RpcRecorder(const RpcRecorder&) = delete;
  RpcRecorder& operator=(const RpcRecorder&) = delete;

  // Finished calls of `session` to `method` ("Memory/Free" matches
  // "/gpumux.v1.Memory/Free"), in the order they finished.
  std::vector<RecordedCall> Calls(SessionId session, absl::string_view method) const;

  // Their requests, parsed as `Request`.
  template <typename Request>
  std::vector<Request> Requests(SessionId session, absl::string_view method) const {
    std::vector<Request> requests;
    for (const RecordedCall& call : Calls(session, method)) {
      requests.emplace_back();
      requests.back().ParseFromString(call.request);
    }
    return requests;
  }

  // Called by the interceptor.
  void Add(RecordedCall call);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gpumux::testing
