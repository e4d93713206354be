#include "tests/client/rpc_recorder.h"

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/support/interceptor.h"
#include "gtest/gtest.h"

namespace gpumux::testing {
namespace {

constexpr char kAllocateMethod[] = "/gpumux.v1.Memory/Allocate";

// The recorder alive now, if any.
absl::Mutex active_mu(absl::kConstInit);
RpcRecorder* active ABSL_GUARDED_BY(active_mu) = nullptr;

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// One per call: collects the call as it passes and hands it over at its end.
class RecordingInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RecordingInterceptor(const grpc::experimental::ClientRpcInfo& info)
      : unary_(info.type() == grpc::experimental::ClientRpcInfo::Type::UNARY) {
    call_.method = info.method();
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (unary_) {
      if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_INITIAL_METADATA)) {
        const auto& metadata = *methods->GetSendInitialMetadata();
        auto it = metadata.find("gpumux-session");
        uint64_t id = 0;
        if (it != metadata.end() &&
            absl::SimpleAtoi(it->second.substr(0, it->second.find(':')), &id)) {
          call_.session = SessionId(id);
        }
      }
      if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_MESSAGE)) {
        if (const grpc::ByteBuffer* request = methods->GetSerializedSendMessage()) {
          call_.request = Flatten(*request);
        }
      }
      if (methods->QueryInterceptionHookPoint(Hook::POST_RECV_MESSAGE) &&
          call_.method == kAllocateMethod) {
        // The type the stub received into, as gRPC documents for GetRecvMessage.
        if (const auto* response =
                static_cast<const v1::AllocateResponse*>(methods->GetRecvMessage())) {
          call_.allocation = response->allocation();
        }
      }
      if (methods->QueryInterceptionHookPoint(Hook::POST_RECV_STATUS)) {
        call_.code = methods->GetRecvStatus()->error_code();
        absl::MutexLock lock(&active_mu);
        if (active != nullptr) active->Add(std::move(call_));
      }
    }
    methods->Proceed();
  }

 private:
  const bool unary_;
  RecordedCall call_;
};

class RecordingFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new RecordingInterceptor(*info);
  }
};

// gRPC wants the global factory registered once, before any call.
const bool registered = [] {
  static RecordingFactory factory;
  grpc::experimental::RegisterGlobalClientInterceptorFactory(&factory);
  return true;
}();

}  // namespace

struct RpcRecorder::State {
  mutable absl::Mutex mu;
  std::vector<RecordedCall> calls ABSL_GUARDED_BY(mu);
};

RpcRecorder::RpcRecorder() : state_(std::make_unique<State>()) {
  absl::MutexLock lock(&active_mu);
  EXPECT_TRUE(registered);
  EXPECT_EQ(active, nullptr) << "another RpcRecorder is recording";
  active = this;
}

RpcRecorder::~RpcRecorder() {
  {
    absl::MutexLock lock(&active_mu);
    if (active == this) active = nullptr;
  }
}

void RpcRecorder::Add(RecordedCall call) {
  absl::MutexLock lock(&state_->mu);
  state_->calls.push_back(std::move(call));
}

std::vector<RecordedCall> RpcRecorder::Calls(SessionId session, absl::string_view method) const {
  const std::string suffix = absl::StrCat(".", method);
  std::vector<RecordedCall> calls;
  absl::MutexLock lock(&state_->mu);
  for (const RecordedCall& call : state_->calls) {
    if (call.session == session && absl::EndsWith(call.method, suffix)) calls.push_back(call);
  }
  return calls;
}

}  // namespace gpumux::testing
