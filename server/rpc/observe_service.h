#pragma once

// gpumux.v1.Observe: the read-only operator view of sessions and memory,
// device-wide or per session, from the core (ListSessionOverviews,
// MemoryManager); conversion lives in observe_proto.h and memory_proto.h.
// Needs no session; served over TCP too.

#include "gpumux/v1/observe.grpc.pb.h"
#include "server/core/memory_manager.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"

namespace gpumux {

class ObserveService final : public v1::Observe::CallbackService {
 public:
  // All must outlive the service.
  ObserveService(const MemoryManager* memory, const StreamManager* streams,
                 const SessionRegistry* sessions)
      : memory_(memory), streams_(streams), sessions_(sessions) {}

  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* GetMemoryStats(grpc::CallbackServerContext* context,
                                           const v1::ObserveStatsRequest* request,
                                           v1::MemoryStats* response) override;
  grpc::ServerUnaryReactor* GetMemorySummary(grpc::CallbackServerContext* context,
                                             const v1::ObserveSummaryRequest* request,
                                             v1::MemorySummary* response) override;
  grpc::ServerUnaryReactor* GetMemorySnapshot(grpc::CallbackServerContext* context,
                                              const v1::ObserveSnapshotRequest* request,
                                              v1::MemorySnapshot* response) override;

 private:
  const MemoryManager* memory_;
  const StreamManager* streams_;
  const SessionRegistry* sessions_;
};

}  // namespace gpumux
