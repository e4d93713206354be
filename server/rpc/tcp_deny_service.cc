#include "server/rpc/tcp_deny_service.h"

#include <string>

namespace gpumux {

grpc::ServerGenericBidiReactor* TcpDenyService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  class Deny final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Deny(const std::string& method) {
      Finish(grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          method + " is not served on the TCP listener: it serves only gpumux.v1.Device and "
                   "gpumux.v1.Observe; use the daemon's Unix socket"));
    }
    void OnDone() override { delete this; }
  };
  return new Deny(context->method());
}

}  // namespace gpumux
