#include "server/rpc/parse_failure_interceptor.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

class ParseFailureInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseFailureInterceptor(const char* method) : method_(method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsed_ = true;
    }
    if (unparsed_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat(
              "the request to ", method_,
              " could not be parsed as its request message (malformed protobuf bytes, or a string "
              "field that is not valid UTF-8)")));
    }
    methods->Proceed();
  }

 private:
  const char* const method_;  // the server's method table outlives every call
  bool unparsed_ = false;     // one interceptor per call, run in the call's order
};

void LogProtobufMessage(google::protobuf::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      spdlog::debug("protobuf {}:{}: {}", filename, line, message);
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      spdlog::info("protobuf {}:{}: {}", filename, line, message);
      break;
    default:
      // A request that fails to parse is answered INVALID_ARGUMENT; the line
      // is for whoever debugs the client.
      spdlog::warn("protobuf {}:{}: {}", filename, line, message);
      break;
  }
}

}  // namespace

grpc::experimental::Interceptor* ParseFailureInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
  return new ParseFailureInterceptor(info->method());
}

void InstallProtobufLogHandler() { google::protobuf::SetLogHandler(&LogProtobufMessage); }

}  // namespace gpumux
