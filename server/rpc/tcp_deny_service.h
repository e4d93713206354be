#pragma once

// On the TCP listener, every method outside the observe surface (Device,
// Observe, health, reflection) lands here and is refused with
// PERMISSION_DENIED: mutating services are served on the Unix socket only.

#include "grpcpp/generic/async_generic_service.h"

namespace gpumux {

class TcpDenyService final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;
};

}  // namespace gpumux
