#include "server/rpc/observe_service.h"

#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "common/memory_summary.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/memory_proto.h"

namespace gpumux {
namespace {

std::optional<SessionId> OptionalSession(uint64_t id) {
  return id == 0 ? std::nullopt : std::optional<SessionId>(SessionId(id));
}

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* ObserveService::ListSessions(grpc::CallbackServerContext* context,
                                                       const v1::ListSessionsRequest* /*request*/,
                                                       v1::ListSessionsResponse* response) {
  for (const SessionInfo& info : sessions_->List()) {
    v1::SessionInfo* out = response->add_sessions();
    out->set_session_id(info.id.value());
    out->set_client_name(info.client_name);
    out->set_pid(info.pid);
    out->set_tenant(info.tenant);
    out->mutable_labels()->insert(info.labels.begin(), info.labels.end());
    out->set_opened_unix_micros(absl::ToUnixMicros(info.opened));
    StreamCounts counts = streams_->Counts(info.id);
    out->set_streams(static_cast<uint32_t>(counts.streams));
    out->set_events(static_cast<uint32_t>(counts.events));
    for (const SessionDeviceUsage& usage : memory_->Usage(info.id)) {
      v1::SessionDeviceUsage* u = out->add_devices();
      u->set_device(usage.device.value());
      u->set_allocated_bytes(usage.allocated_bytes);
      u->set_reserved_bytes(usage.reserved_bytes);
      u->set_allocations(usage.allocations);
      u->set_imported_bytes(usage.imported_bytes);
      u->set_memory_limit_bytes(usage.limit_bytes);
    }
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
  if (stats.ok()) response->set_text(FormatMemorySummary(*stats, request->device(), request->abbreviated()));
  return FinishWith(context, stats.status());
}

grpc::ServerUnaryReactor* ObserveService::GetMemorySnapshot(grpc::CallbackServerContext* context,
                                                            const v1::ObserveSnapshotRequest* request,
                                                            v1::MemorySnapshot* response) {
  std::optional<DeviceIndex> device =
      request->all_devices() ? std::nullopt : std::optional<DeviceIndex>(DeviceIndex(request->device()));
  absl::StatusOr<std::vector<SegmentSnapshot>> segments =
      memory_->Snapshot(device, OptionalSession(request->session_id()));
  if (segments.ok()) ToProto(*segments, response);
  return FinishWith(context, segments.status());
}

}  // namespace gpumux
