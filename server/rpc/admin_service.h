#pragma once

// gpumux.v1.Admin: tenant memory limits, set and listed through the core
// (MemoryManager::SetTenantLimit, ListTenants), an operator's kill of a
// session (SessionLifecycle::Kill) and profile of one (ProfileLiveSession); conversion lives in
// admin_proto.h. Registered only with the admin socket's operator server
// (admin_socket_server.h), which only operators' connections reach.
// AdminDenyService answers the same methods PERMISSION_DENIED elsewhere.

#include <string>
#include <utility>

#include "absl/time/time.h"
#include "gpumux/v1/admin.grpc.pb.h"
#include "server/core/client_queries.h"
#include "server/core/device_profiler.h"
#include "server/core/memory_manager.h"
#include "server/core/session_lifecycle.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

class AdminService final : public v1::Admin::CallbackService {
 public:
  // All must outlive the service. EmptyCache waits up to `reply_timeout`
  // for local clients to return their caches.
  AdminService(MemoryManager* memory, SessionLifecycle* lifecycle, DeviceProfiler* profiler,
               const SessionRegistry* sessions, ClientQueries* queries, BlockingExecutor* executor,
               absl::Duration reply_timeout)
      : memory_(memory),
        lifecycle_(lifecycle),
        profiler_(profiler),
        sessions_(sessions),
        queries_(queries),
        executor_(executor),
        reply_timeout_(reply_timeout) {}

  grpc::ServerUnaryReactor* SetTenantLimit(grpc::CallbackServerContext* context,
                                           const v1::SetTenantLimitRequest* request,
                                           v1::SetTenantLimitResponse* response) override;
  grpc::ServerUnaryReactor* ListTenants(grpc::CallbackServerContext* context,
                                        const v1::ListTenantsRequest* request,
                                        v1::ListTenantsResponse* response) override;
  grpc::ServerUnaryReactor* KillSession(grpc::CallbackServerContext* context,
                                        const v1::KillSessionRequest* request,
                                        v1::KillSessionResponse* response) override;
  grpc::ServerUnaryReactor* ProfileSession(grpc::CallbackServerContext* context,
                                           const v1::ProfileSessionRequest* request,
                                           v1::ProfileSessionResponse* response) override;
  grpc::ServerUnaryReactor* EmptyCache(grpc::CallbackServerContext* context,
                                       const v1::AdminEmptyCacheRequest* request,
                                       v1::AdminEmptyCacheResponse* response) override;

 private:
  MemoryManager* memory_;
  SessionLifecycle* lifecycle_;
  DeviceProfiler* profiler_;
  const SessionRegistry* sessions_;
  ClientQueries* queries_;
  BlockingExecutor* executor_;
  const absl::Duration reply_timeout_;
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
  grpc::ServerUnaryReactor* ProfileSession(grpc::CallbackServerContext* context,
                                           const v1::ProfileSessionRequest* request,
                                           v1::ProfileSessionResponse* response) override;
  grpc::ServerUnaryReactor* EmptyCache(grpc::CallbackServerContext* context,
                                       const v1::AdminEmptyCacheRequest* request,
                                       v1::AdminEmptyCacheResponse* response) override;

 private:
  grpc::ServerUnaryReactor* Deny(grpc::CallbackServerContext* context) const;

  const std::string reason_;
};

}  // namespace gpumux
