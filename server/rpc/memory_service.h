#pragma once

// gpumux.v1.Memory: a thin adapter from the wire to MemoryManager. Every call
// authenticates its session first; conversion lives in memory_proto.h.

#include "gpumux/v1/memory.grpc.pb.h"
#include "server/core/memory_manager.h"
#include "server/core/pressure_relief.h"
#include "server/core/session_registry.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

class MemoryService final : public v1::Memory::CallbackService {
 public:
  // All must outlive the service. An Allocate or Lease that the device's
  // memory (or the tenant's limit) refuses goes to `relief`, which asks
  // other sessions' clients for their cached leases there; the wait for
  // their answers and the retry run on `executor`, never on gRPC's threads.
  MemoryService(MemoryManager* memory, const SessionRegistry* sessions, PressureRelief* relief,
                BlockingExecutor* executor)
      : memory_(memory), sessions_(sessions), relief_(relief), executor_(executor) {}

  grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* context,
                                     const v1::AllocateRequest* request,
                                     v1::AllocateResponse* response) override;
  grpc::ServerUnaryReactor* Lease(grpc::CallbackServerContext* context,
                                  const v1::LeaseRequest* request,
                                  v1::AllocateResponse* response) override;
  grpc::ServerUnaryReactor* GetStatsPage(grpc::CallbackServerContext* context,
                                         const v1::GetStatsPageRequest* request,
                                         v1::StatsPageResponse* response) override;
  grpc::ServerUnaryReactor* Free(grpc::CallbackServerContext* context,
                                 const v1::FreeRequest* request,
                                 v1::FreeResponse* response) override;
  grpc::ServerUnaryReactor* RecordStream(grpc::CallbackServerContext* context,
                                         const v1::RecordStreamRequest* request,
                                         v1::RecordStreamResponse* response) override;
  grpc::ServerUnaryReactor* EmptyCache(grpc::CallbackServerContext* context,
                                       const v1::EmptyCacheRequest* request,
                                       v1::EmptyCacheResponse* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::MemoryStats* response) override;
  grpc::ServerUnaryReactor* ResetPeakStats(grpc::CallbackServerContext* context,
                                           const v1::ResetStatsRequest* request,
                                           v1::ResetStatsResponse* response) override;
  grpc::ServerUnaryReactor* ResetAccumulatedStats(grpc::CallbackServerContext* context,
                                                  const v1::ResetStatsRequest* request,
                                                  v1::ResetStatsResponse* response) override;
  grpc::ServerUnaryReactor* GetSummary(grpc::CallbackServerContext* context,
                                       const v1::GetSummaryRequest* request,
                                       v1::MemorySummary* response) override;
  grpc::ServerUnaryReactor* GetSnapshot(grpc::CallbackServerContext* context,
                                        const v1::GetSnapshotRequest* request,
                                        v1::MemorySnapshot* response) override;
  grpc::ServerUnaryReactor* SetMemoryLimit(grpc::CallbackServerContext* context,
                                           const v1::SetMemoryLimitRequest* request,
                                           v1::SetMemoryLimitResponse* response) override;
  grpc::ServerUnaryReactor* Share(grpc::CallbackServerContext* context,
                                  const v1::ShareRequest* request,
                                  v1::ShareResponse* response) override;
  grpc::ServerUnaryReactor* Import(grpc::CallbackServerContext* context,
                                   const v1::ImportRequest* request,
                                   v1::ImportResponse* response) override;

 private:
  // `attempt(session, first)` allocates for the call's session; a first
  // refusal that other sessions' cached leases may relieve is retried on
  // the executor after asking them (PressureRelief). With `count_ooms` a
  // refusal that stands counts in num_ooms once (Allocate; a refused Lease
  // is counted by the client's allocator, which raises the OOM). `fill`
  // writes the granted view into the response.
  template <typename Attempt, typename Fill>
  grpc::ServerUnaryReactor* ServeRelievingPressure(grpc::CallbackServerContext* context,
                                                   DeviceIndex device, bool count_ooms,
                                                   Attempt attempt, Fill fill);

  MemoryManager* memory_;
  const SessionRegistry* sessions_;
  PressureRelief* relief_;
  BlockingExecutor* executor_;
};

}  // namespace gpumux
