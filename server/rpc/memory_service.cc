#include "server/rpc/memory_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "common/formats/memory_summary.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/memory_proto.h"
#include "server/rpc/serve_session_call.h"
#include "server/rpc/session_auth.h"

namespace gpumux {
namespace {

std::vector<AllocationId> ToIds(const google::protobuf::RepeatedField<uint64_t>& ids) {
  std::vector<AllocationId> out;
  out.reserve(static_cast<size_t>(ids.size()));
  for (uint64_t id : ids) out.emplace_back(id);
  return out;
}

std::optional<DeviceIndex> OptionalDevice(bool has, int32_t device) {
  return has ? std::optional<DeviceIndex>(DeviceIndex(device)) : std::nullopt;
}

}  // namespace

template <typename Attempt, typename Fill>
grpc::ServerUnaryReactor* MemoryService::ServeRelievingPressure(
    grpc::CallbackServerContext* context, DeviceIndex device, bool count_ooms, Attempt attempt,
    Fill fill) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<SessionId> session = AuthenticateCall(*context, *sessions_);
  if (!session.ok()) {
    reactor->Finish(ToGrpcStatus(session.status()));
    return reactor;
  }
  absl::StatusOr<AllocationView> view = attempt(*session, /*first=*/true);
  if (view.ok()) {
    fill(*view);
    reactor->Finish(FinishStatus(*sessions_, absl::OkStatus()));
    return reactor;
  }
  std::vector<SessionId> holders = relief_->Holders(*session, device, view.status(), count_ooms);
  if (holders.empty()) {
    reactor->Finish(FinishStatus(*sessions_, view.status()));
    return reactor;
  }
  // Waiting for other processes must not hold a gRPC thread.
  FinishOnExecutor(reactor, *sessions_, *executor_, *session,
                   [this, device, holders = std::move(holders), attempt, fill](SessionId s) {
                     absl::StatusOr<AllocationView> retried = relief_->AskAndRetry(
                         device, holders, [&] { return attempt(s, /*first=*/false); });
                     if (!retried.ok()) return retried.status();
                     fill(*retried);
                     return absl::OkStatus();
                   });
  return reactor;
}

grpc::ServerUnaryReactor* MemoryService::Allocate(grpc::CallbackServerContext* context,
                                                  const v1::AllocateRequest* request,
                                                  v1::AllocateResponse* response) {
  return ServeRelievingPressure(
      context, DeviceIndex(request->device()), /*count_ooms=*/true,
      [this, request](SessionId session, bool first) {
        // The frees apply with the first attempt only.
        std::vector<AllocationId> frees;
        std::vector<std::string> handles;
        if (first) {
          frees = ToIds(request->free_allocation_ids());
          handles.assign(request->free_wait_event_handles().begin(),
                         request->free_wait_event_handles().end());
        }
        return memory_->Allocate(session, DeviceIndex(request->device()),
                                 StreamId(request->stream()), request->size(), request->shareable(),
                                 frees, handles, /*count_oom=*/!first);
      },
      [response](const AllocationView& view) { ToProto(view, response->mutable_allocation()); });
}

grpc::ServerUnaryReactor* MemoryService::Lease(grpc::CallbackServerContext* context,
                                               const v1::LeaseRequest* request,
                                               v1::AllocateResponse* response) {
  return ServeRelievingPressure(
      context, DeviceIndex(request->device()), /*count_ooms=*/false,
      [this, request](SessionId session, bool first) {
        return memory_->Lease(
            session, DeviceIndex(request->device()), StreamId(request->stream()), request->size(),
            request->small_pool(),
            first ? ToIds(request->free_allocation_ids()) : std::vector<AllocationId>(),
            /*count_oom=*/false);
      },
      [response](const AllocationView& view) { ToProto(view, response->mutable_allocation()); });
}

grpc::ServerUnaryReactor* MemoryService::GetStatsPage(grpc::CallbackServerContext* context,
                                                      const v1::GetStatsPageRequest* /*request*/,
                                                      v1::StatsPageResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(StatsPageInfo page, memory_->GetStatsPage(session));
    response->set_key(page.key);
    response->set_size(page.size);
    response->set_device_count(page.device_count);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MemoryService::Free(grpc::CallbackServerContext* context,
                                              const v1::FreeRequest* request,
                                              v1::FreeResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    std::vector<std::string> handles(request->wait_event_handles().begin(),
                                     request->wait_event_handles().end());
    return memory_->Free(session, ToIds(request->allocation_ids()), handles);
  });
}

grpc::ServerUnaryReactor* MemoryService::RecordStream(grpc::CallbackServerContext* context,
                                                      const v1::RecordStreamRequest* request,
                                                      v1::RecordStreamResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return memory_->RecordStream(session, AllocationId(request->allocation_id()),
                                 StreamId(request->stream()));
  });
}

grpc::ServerUnaryReactor* MemoryService::EmptyCache(grpc::CallbackServerContext* context,
                                                    const v1::EmptyCacheRequest* request,
                                                    v1::EmptyCacheResponse* response) {
  const std::optional<DeviceIndex> device =
      OptionalDevice(!request->all_devices(), request->device());
  if (request->all_sessions()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(absl::PermissionDeniedError(
        "emptying every session's cache is an operator's action: Admin.EmptyCache on the admin "
        "socket (gpumux empty-cache, as root or gpumuxd's user)")));
    return reactor;
  }
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(const EmptyCacheResult result,
                            memory_->EmptyCache(session, device, /*all_sessions=*/false));
    response->set_released_bytes(result.released_bytes);
    response->set_released_segments(result.released_segments);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MemoryService::GetStats(grpc::CallbackServerContext* context,
                                                  const v1::GetStatsRequest* request,
                                                  v1::MemoryStats* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(DeviceStats stats,
                            memory_->GetStats(DeviceIndex(request->device()), session));
    ToProto(stats, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MemoryService::ResetPeakStats(grpc::CallbackServerContext* context,
                                                        const v1::ResetStatsRequest* request,
                                                        v1::ResetStatsResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return memory_->ResetPeakStats(session, DeviceIndex(request->device()));
  });
}

grpc::ServerUnaryReactor* MemoryService::ResetAccumulatedStats(
    grpc::CallbackServerContext* context, const v1::ResetStatsRequest* request,
    v1::ResetStatsResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) {
    return memory_->ResetAccumulatedStats(session, DeviceIndex(request->device()));
  });
}

grpc::ServerUnaryReactor* MemoryService::GetSummary(grpc::CallbackServerContext* context,
                                                    const v1::GetSummaryRequest* request,
                                                    v1::MemorySummary* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(DeviceStats stats,
                            memory_->GetStats(DeviceIndex(request->device()), session));
    response->set_text(FormatMemorySummary(stats, request->device(), request->abbreviated()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MemoryService::GetSnapshot(grpc::CallbackServerContext* context,
                                                     const v1::GetSnapshotRequest* request,
                                                     v1::MemorySnapshot* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(
        std::vector<SegmentSnapshot> segments,
        memory_->Snapshot(OptionalDevice(!request->all_devices(), request->device()), session));
    ToProto(segments, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MemoryService::SetMemoryLimit(grpc::CallbackServerContext* context,
                                                        const v1::SetMemoryLimitRequest* request,
                                                        v1::SetMemoryLimitResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    MemoryLimit limit;
    switch (request->limit_case()) {
      case v1::SetMemoryLimitRequest::kFraction:
        limit.kind = MemoryLimit::Kind::kFraction;
        limit.fraction = request->fraction();
        break;
      case v1::SetMemoryLimitRequest::kBytes:
        limit.kind = MemoryLimit::Kind::kBytes;
        limit.bytes = request->bytes();
        break;
      case v1::SetMemoryLimitRequest::kUnlimited:
        limit.kind = MemoryLimit::Kind::kUnlimited;
        break;
      case v1::SetMemoryLimitRequest::LIMIT_NOT_SET:
        return absl::InvalidArgumentError("set one of fraction, bytes or unlimited");
    }
    GPUMUX_ASSIGN_OR_RETURN(
        uint64_t bytes, memory_->SetMemoryLimit(session, DeviceIndex(request->device()), limit));
    response->set_limit_bytes(bytes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MemoryService::Share(grpc::CallbackServerContext* context,
                                               const v1::ShareRequest* request,
                                               v1::ShareResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(std::string token,
                            memory_->Share(session, AllocationId(request->allocation_id())));
    response->set_token(std::move(token));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MemoryService::Import(grpc::CallbackServerContext* context,
                                                const v1::ImportRequest* request,
                                                v1::ImportResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(AllocationView view, memory_->Import(session, request->token()));
    ToProto(view, response->mutable_allocation());
    return absl::OkStatus();
  });
}

}  // namespace gpumux
