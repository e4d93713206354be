#pragma once

// gpumux.v1.Admin: tenant memory limits, set and listed through the core
// (MemoryManager::SetTenantLimit, ListTenants), and an operator's kill of a
// session (SessionLifecycle::Kill); conversion lives in
// admin_proto.h. Registered only with the admin socket's operator server
// (admin_socket_server.h), which only operators' connections reach.
// AdminDenyService answers the same methods PERMISSION_DENIED elsewhere.

#include <string>
#include <utility>

#include "gpumux/v1/admin.grpc.pb.h"
#include "server/core/memory_manager.h"
#include "server/core/session_lifecycle.h"

namespace gpumux {

class AdminService final : public v1::Admin::CallbackService {
 public:
  // Both must outlive the service.
  AdminService(MemoryManager* memory, SessionLifecycle* lifecycle)
      : memory_(memory), lifecycle_(lifecycle) {}

  grpc::ServerUnaryReactor* SetTenantLimit(grpc::CallbackServerContext* context,
                                           const v1::SetTenantLimitRequest* request,
                                           v1::SetTenantLimitResponse* response) override;
  grpc::ServerUnaryReactor* ListTenants(grpc::CallbackServerContext* context,
                                        const v1::ListTenantsRequest* request,
                                        v1::ListTenantsResponse* response) override;
  grpc::ServerUnaryReactor* KillSession(grpc::CallbackServerContext* context,
                                        const v1::KillSessionRequest* request,
                                        v1::KillSessionResponse* response) override;

 private:
  MemoryManager* memory_;
  SessionLifecycle* lifecycle_;
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
  grpc::ServerUnaryReactor* KillSession(grpc::CallbackServerContext* context,
                                        const v1::KillSessionRequest* request,
                                        v1::KillSessionResponse* response) override;

 private:
  grpc::ServerUnaryReactor* Deny(grpc::CallbackServerContext* context) const;

  const std::string reason_;
};

}  // namespace gpumux
