#pragma once

// gpumux.v1.Admin: tenant memory limits, set and listed through the core
// (MemoryManager::SetTenantLimit, ListTenants); conversion lives in
// admin_proto.h. Registered only with the admin socket's operator server
// (admin_socket_server.h), which only operators' connections reach.
// AdminDenyService answers the same methods PERMISSION_DENIED elsewhere.

#include <string>
#include <utility>

#include "gpumux/v1/admin.grpc.pb.h"
#include "server/core/memory_manager.h"

namespace gpumux {

class AdminService final : public v1::Admin::CallbackService {
 public:
  // `memory` must outlive the service.
  explicit AdminService(MemoryManager* memory) : memory_(memory) {}

  grpc::ServerUnaryReactor* SetTenantLimit(grpc::CallbackServerContext* context,
                                           const v1::SetTenantLimitRequest* request,
                                           v1::SetTenantLimitResponse* response) override;
  grpc::ServerUnaryReactor* ListTenants(grpc::CallbackServerContext* context,
                                        const v1::ListTenantsRequest* request,
                                        v1::ListTenantsResponse* response) override;

 private:
  MemoryManager* memory_;
};

// Every Admin method answered PERMISSION_DENIED with `reason`: on the main
// Unix socket (Admin is served on the admin socket only) and on the admin
// socket for a peer that is not an operator.
class AdminDenyService final : public v1::Admin::CallbackService {
 public:
  explicit AdminDenyService(std::string reason) : reason_(std::move(reason)) {}

  grpc::ServerUnaryReactor* SetTenantLimit(grpc::CallbackServerContext* context,
                                           const v1::SetTenantLimitRequest* request,
                                           v1::SetTenantLimitResponse* response) override;
  grpc::ServerUnaryReactor* ListTenants(grpc::CallbackServerContext* context,
                                        const v1::ListTenantsRequest* request,
                                        v1::ListTenantsResponse* response) override;

 private:
  grpc::ServerUnaryReactor* Deny(grpc::CallbackServerContext* context) const;

  const std::string reason_;
};

}  // namespace gpumux
