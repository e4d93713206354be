#include "server/rpc/unserved_method_service.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace gpumux {
namespace {

// "/package.Service/Method" -> "package.Service"; "" when not of that shape.
absl::string_view ServiceOf(absl::string_view method) {
  if (!absl::ConsumePrefix(&method, "/")) return "";
  const size_t slash = method.find('/');
  return slash == absl::string_view::npos ? "" : method.substr(0, slash);
}

class Answer final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Answer(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

UnservedMethodService::UnservedMethodService(
    std::string listener, std::vector<std::string> services,
    absl::flat_hash_map<std::string, std::string> elsewhere)
    : listener_(std::move(listener)),
      services_(absl::StrJoin(services, ", ")),
      elsewhere_(std::move(elsewhere)) {}

grpc::ServerGenericBidiReactor* UnservedMethodService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  // The method is the client's text: quoted with its bytes escaped where it
  // goes into a message (a log line may show it).
  const std::string method = context->method();
  const absl::string_view service = ServiceOf(method);
  if (auto it = elsewhere_.find(service); it != elsewhere_.end()) {
    return new Answer(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat(service, " is not served on ", listener_, ": it is served on ", it->second)));
  }
  return new Answer(
      grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                   absl::StrCat("gpumuxd has no method '", absl::CHexEscape(method.substr(0, 256)),
                                "' on ", listener_, ", which serves ", services_)));
}

}  // namespace gpumux
