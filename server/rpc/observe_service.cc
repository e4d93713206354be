#include "server/rpc/observe_service.h"

#include <optional>
#include <vector>

#include "common/memory_summary.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/memory_proto.h"
#include "server/rpc/observe_proto.h"

namespace gpumux {
namespace {

std::optional<SessionId> OptionalSession(uint64_t id) {
  return id == 0 ? std::nullopt : std::optional<SessionId>(SessionId(id));
}

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* ObserveService::ListSessions(grpc::CallbackServerContext* context,
                                                       const v1::ListSessionsRequest* /*request*/,
                                                       v1::ListSessionsResponse* response) {
  for (const SessionOverview& overview : ListSessionOverviews(*sessions_, *streams_, *memory_)) {
    ToProto(overview, response->add_sessions());
  }
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ObserveService::GetMemoryStats(grpc::CallbackServerContext* context,
                                                         const v1::ObserveStatsRequest* request,
                                                         v1::MemoryStats* response) {
  absl::StatusOr<DeviceStats> stats =
      memory_->GetStats(DeviceIndex(request->device()), OptionalSession(request->session_id()));
  if (stats.ok()) ToProto(*stats, response);
  return FinishWith(context, stats.status());
}

grpc::ServerUnaryReactor* ObserveService::GetMemorySummary(grpc::CallbackServerContext* context,
                                                           const v1::ObserveSummaryRequest* request,
                                                           v1::MemorySummary* response) {
  absl::StatusOr<DeviceStats> stats =
      memory_->GetStats(DeviceIndex(request->device()), OptionalSession(request->session_id()));
  if (stats.ok())
    response->set_text(FormatMemorySummary(*stats, request->device(), request->abbreviated()));
  return FinishWith(context, stats.status());
}

grpc::ServerUnaryReactor* ObserveService::GetMemorySnapshot(
    grpc::CallbackServerContext* context, const v1::ObserveSnapshotRequest* request,
    v1::MemorySnapshot* response) {
  std::optional<DeviceIndex> device =
      request->all_devices() ? std::nullopt
                             : std::optional<DeviceIndex>(DeviceIndex(request->device()));
  absl::StatusOr<std::vector<SegmentSnapshot>> segments =
      memory_->Snapshot(device, OptionalSession(request->session_id()));
  if (segments.ok()) ToProto(*segments, response);
  return FinishWith(context, segments.status());
}

}  // namespace gpumux
