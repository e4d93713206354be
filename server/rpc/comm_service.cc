#include "server/rpc/comm_service.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/request_limits.h"
#include "common/base/status_macros.h"
#include "server/rpc/comm_proto.h"
#include "server/rpc/serve_collective.h"

namespace gpumux {
namespace {

absl::StatusOr<std::vector<int64_t>> List(const google::protobuf::RepeatedField<int64_t>& values) {
  if (static_cast<size_t>(values.size()) > kMaxCommDevicesPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat("a collective's list holds at most ",
                                                   kMaxCommDevicesPerRequest, " entries, not ",
                                                   values.size()));
  }
  return std::vector<int64_t>(values.begin(), values.end());
}

absl::StatusOr<std::optional<std::vector<int64_t>>> OptionalList(
    bool present, const google::protobuf::RepeatedField<int64_t>& values) {
  if (!present) return std::nullopt;
  GPUMUX_ASSIGN_OR_RETURN(std::vector<int64_t> list, List(values));
  return std::optional<std::vector<int64_t>>(std::move(list));
}

absl::StatusOr<std::optional<std::vector<CommTensor>>> OptionalTensors(bool present,
                                                                       const v1::TensorList& list) {
  if (!present) return std::nullopt;
  return FromProto(list.tensors());
}

}  // namespace

grpc::ServerUnaryReactor* CommService::Broadcast(grpc::CallbackServerContext* context,
                                                 const v1::BroadcastRequest* request,
                                                 v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(), false, response,
      [work = work_, request](SessionId session,
                              const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor tensor, FromProto(request->tensor()));
        GPUMUX_ASSIGN_OR_RETURN(const auto devices,
                                OptionalList(request->has_devices(), request->devices().devices()));
        GPUMUX_ASSIGN_OR_RETURN(const auto out,
                                OptionalTensors(request->has_out(), request->out()));
        return work->Broadcast(session, tensor, devices, out, options);
      });
}

grpc::ServerUnaryReactor* CommService::BroadcastCoalesced(
    grpc::CallbackServerContext* context, const v1::BroadcastCoalescedRequest* request,
    v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(), false, response,
      [work = work_, request](SessionId session,
                              const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::vector<CommTensor> tensors,
                                FromProto(request->tensors()));
        GPUMUX_ASSIGN_OR_RETURN(const std::vector<int64_t> devices, List(request->devices()));
        return work->BroadcastCoalesced(session, tensors, devices, request->buffer_size(), options);
      });
}

grpc::ServerUnaryReactor* CommService::ReduceAdd(grpc::CallbackServerContext* context,
                                                 const v1::ReduceAddRequest* request,
                                                 v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(), false, response,
      [work = work_, request](SessionId session,
                              const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::vector<CommTensor> inputs, FromProto(request->inputs()));
        return work->ReduceAdd(session, inputs, request->destination(), options);
      });
}

grpc::ServerUnaryReactor* CommService::ReduceAddCoalesced(
    grpc::CallbackServerContext* context, const v1::ReduceAddCoalescedRequest* request,
    v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(), false, response,
      [work = work_, request](SessionId session,
                              const CommOptions& options) -> absl::StatusOr<CommDone> {
        if (static_cast<size_t>(request->inputs_size()) > kMaxCommDevicesPerRequest) {
          return absl::InvalidArgumentError(absl::StrCat("reduce_add_coalesced takes at most ",
                                                         kMaxCommDevicesPerRequest, " lists, not ",
                                                         request->inputs_size()));
        }
        std::vector<std::vector<CommTensor>> inputs;
        for (const v1::TensorList& list : request->inputs()) {
          GPUMUX_ASSIGN_OR_RETURN(std::vector<CommTensor> tensors, FromProto(list.tensors()));
          inputs.push_back(std::move(tensors));
        }
        return work->ReduceAddCoalesced(session, inputs, request->destination(),
                                        request->buffer_size(), options);
      });
}

grpc::ServerUnaryReactor* CommService::Scatter(grpc::CallbackServerContext* context,
                                               const v1::ScatterRequest* request,
                                               v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(), false, response,
      [work = work_, request](SessionId session,
                              const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const CommTensor tensor, FromProto(request->tensor()));
        GPUMUX_ASSIGN_OR_RETURN(const auto devices,
                                OptionalList(request->has_devices(), request->devices().devices()));
        GPUMUX_ASSIGN_OR_RETURN(
            const auto chunk_sizes,
            OptionalList(request->has_chunk_sizes(), request->chunk_sizes().sizes()));
        GPUMUX_ASSIGN_OR_RETURN(const auto out,
                                OptionalTensors(request->has_out(), request->out()));
        if (static_cast<size_t>(request->chunk_streams_size()) > kMaxCommTensorsPerRequest) {
          return absl::InvalidArgumentError(
              absl::StrCat("scatter takes at most ", kMaxCommTensorsPerRequest,
                           " chunk streams, not ", request->chunk_streams_size()));
        }
        std::vector<StreamId> streams;
        for (uint64_t stream : request->chunk_streams()) streams.emplace_back(stream);
        return work->Scatter(session, tensor, devices, chunk_sizes, request->dim(), streams, out,
                             options);
      });
}

grpc::ServerUnaryReactor* CommService::Gather(grpc::CallbackServerContext* context,
                                              const v1::GatherRequest* request,
                                              v1::CommResponse* response) {
  const bool inline_bytes = request->destination_case() == v1::GatherRequest::kHostInline;
  return ServeCollective(
      context, *sessions_, *executor_, request->options(), inline_bytes, response,
      [work = work_, request, response](SessionId session,
                                        const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::vector<CommTensor> tensors,
                                FromProto(request->tensors()));
        std::optional<GatherDestination> destination;
        switch (request->destination_case()) {
          case v1::GatherRequest::kDevice:
            if (request->device() < INT32_MIN || request->device() > INT32_MAX) {
              return absl::InvalidArgumentError(
                  absl::StrCat("gather: no device ", request->device()));
            }
            destination = GatherDestination{GatherDestination::Kind::kDevice,
                                            DeviceIndex(static_cast<int>(request->device())), 0};
            break;
          case v1::GatherRequest::kHostInline:
            if (!request->host_inline()) {
              return absl::InvalidArgumentError(
                  "gather: host_inline is set to false; set it to true, or choose another "
                  "destination");
            }
            destination =
                GatherDestination{GatherDestination::Kind::kHostInline, DeviceIndex(0), 0};
            break;
          case v1::GatherRequest::kHostStagingOffset:
            destination = GatherDestination{GatherDestination::Kind::kHostStaging, DeviceIndex(0),
                                            request->host_staging_offset()};
            break;
          case v1::GatherRequest::DESTINATION_NOT_SET:
            break;
        }
        std::optional<CommTensor> out;
        if (request->has_out()) {
          GPUMUX_ASSIGN_OR_RETURN(out, FromProto(request->out()));
        } else if (!destination.has_value()) {
          return absl::InvalidArgumentError(
              "gather: set the destination (a device or the host) or out");
        }
        return work->Gather(session, tensors, request->dim(), destination, out, options,
                            response->mutable_host_data());
      });
}

grpc::ServerUnaryReactor* CommService::AllReduce(grpc::CallbackServerContext* context,
                                                 const v1::AllReduceRequest* request,
                                                 v1::CommResponse* response) {
  return ServeCollective(
      context, *sessions_, *executor_, request->options(), false, response,
      [work = work_, request](SessionId session,
                              const CommOptions& options) -> absl::StatusOr<CommDone> {
        GPUMUX_ASSIGN_OR_RETURN(const std::vector<CommTensor> inputs, FromProto(request->inputs()));
        GPUMUX_ASSIGN_OR_RETURN(const auto outputs,
                                OptionalTensors(request->has_outputs(), request->outputs()));
        GPUMUX_ASSIGN_OR_RETURN(const ReduceOp op, FromProto(request->op()));
        return work->AllReduce(session, inputs, outputs, op, options);
      });
}

}  // namespace gpumux
