#include "server/rpc/observe_service.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

#include "common/formats/memory_summary.h"
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
  const std::optional<DeviceIndex> device =
      request->all_devices() ? std::nullopt
                             : std::optional<DeviceIndex>(DeviceIndex(request->device()));
  const std::optional<SessionId> session = OptionalSession(request->session_id());
  absl::StatusOr<std::vector<SegmentSnapshot>> segments = memory_->Snapshot(device, session);
  if (!segments.ok()) return FinishWith(context, segments.status());
  // Leased segments' blocks are in their clients' own allocators.
  absl::flat_hash_set<SessionId> leasing;
  for (const SegmentSnapshot& segment : *segments) {
    if (segment.leased) leasing.insert(SessionId(segment.client.value()));
  }
  if (leasing.empty()) {
    ToProto(*segments, response);
    return FinishWith(context, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::vector<SessionId> ask(leasing.begin(), leasing.end());
  absl::Status started =
      executor_->Run([this, reactor, response, device, session, ask = std::move(ask)] {
        const ClientQueries::LeaseBlocksAnswers answers =
            queries_->LeaseBlocks(ask, absl::Now() + reply_timeout_,
                                  [this](SessionId s) { return memory_->BlocksVersion(s); });
        // The books as they are now, after the answers: a lease returned
        // meanwhile is gone from both.
        absl::StatusOr<std::vector<SegmentSnapshot>> now = memory_->Snapshot(device, session);
        if (now.ok()) {
          FillLeaseBlocks(answers, reply_timeout_, *now);
          ToProto(*now, response);
        }
        reactor->Finish(ToGrpcStatus(now.status()));
      });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));
  return reactor;
}

}  // namespace gpumux
