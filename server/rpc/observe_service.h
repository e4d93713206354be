#pragma once

// gpumux.v1.Observe: the read-only operator view of sessions and memory,
// device-wide or per session, from the core (ListSessionOverviews,
// MemoryManager); conversion lives in observe_proto.h and memory_proto.h.
// Needs no session; served over TCP too.

#include "absl/time/time.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "server/core/client_queries.h"
#include "server/core/memory_manager.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

class ObserveService final : public v1::Observe::CallbackService {
 public:
  // All must outlive the service. A snapshot that covers leased segments
  // asks their sessions' clients for the blocks through `queries`, waiting
  // up to `reply_timeout` on `executor` (FillLeaseBlocks).
  ObserveService(const MemoryManager* memory, const StreamManager* streams,
                 const SessionRegistry* sessions, ClientQueries* queries,
                 BlockingExecutor* executor, absl::Duration reply_timeout)
      : memory_(memory),
        streams_(streams),
        sessions_(sessions),
        queries_(queries),
        executor_(executor),
        reply_timeout_(reply_timeout) {}

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
  ClientQueries* queries_;
  BlockingExecutor* executor_;
  const absl::Duration reply_timeout_;
};

}  // namespace gpumux
