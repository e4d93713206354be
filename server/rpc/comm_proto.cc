#include "server/rpc/comm_proto.h"

#include "absl/strings/str_cat.h"
#include "common/base/request_limits.h"
#include "common/base/status_macros.h"
#include "server/rpc/memory_proto.h"
#include "server/rpc/random_proto.h"

namespace gpumux {

absl::StatusOr<CommTensor> FromProto(const v1::Tensor& tensor) {
  CommTensor out;
  out.id = AllocationId(tensor.memory().allocation_id());
  out.offset = tensor.memory().offset();
  GPUMUX_ASSIGN_OR_RETURN(out.dtype, DtypeFromProto(tensor.dtype()));
  if (static_cast<size_t>(tensor.shape_size()) > kMaxTensorDims) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor has at most ", kMaxTensorDims,
                                                   " dimensions, not ", tensor.shape_size()));
  }
  out.shape.assign(tensor.shape().begin(), tensor.shape().end());
  out.device = DeviceIndex(tensor.device());
  return out;
}

absl::StatusOr<std::vector<CommTensor>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors) {
  if (static_cast<size_t>(tensors.size()) > kMaxCommTensorsPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat("a collective names at most ",
                                                   kMaxCommTensorsPerRequest, " tensors, not ",
                                                   tensors.size()));
  }
  std::vector<CommTensor> out;
  out.reserve(static_cast<size_t>(tensors.size()));
  for (const v1::Tensor& tensor : tensors) {
    GPUMUX_ASSIGN_OR_RETURN(CommTensor converted, FromProto(tensor));
    out.push_back(std::move(converted));
  }
  return out;
}

absl::StatusOr<CommOptions> FromProto(const v1::CommOptions& options) {
  if (options.streams_size() > static_cast<int>(kMaxCommDevicesPerRequest)) {
    return absl::InvalidArgumentError(absl::StrCat("a collective names at most ",
                                                   kMaxCommDevicesPerRequest, " streams, not ",
                                                   options.streams_size()));
  }
  if (options.wait() && options.async_op()) {
    return absl::InvalidArgumentError(
        "a collective cannot both wait and be async_op (returning once queued)");
  }
  CommOptions out;
  for (const auto& [device, stream] : options.streams())
    out.streams.emplace_back(DeviceIndex(device), StreamId(stream));
  out.wait = options.wait();
  out.completion_event = options.completion_event();
  out.async_op = options.async_op();
  return out;
}

absl::StatusOr<ReduceOp> FromProto(v1::ReduceOp op) {
  switch (op) {
    case v1::REDUCE_OP_SUM:
      return ReduceOp::kSum;
    case v1::REDUCE_OP_PRODUCT:
      return ReduceOp::kProduct;
    case v1::REDUCE_OP_MIN:
      return ReduceOp::kMin;
    case v1::REDUCE_OP_MAX:
      return ReduceOp::kMax;
    case v1::REDUCE_OP_AVG:
      return ReduceOp::kAvg;
    default:
      return absl::InvalidArgumentError(absl::StrCat("reduce op ", static_cast<int>(op),
                                                     " is not one of sum, prod, min, max, avg"));
  }
}

void ToProto(const CommDone& done, v1::CommResponse* response) {
  for (const CommResult& result : done.results) {
    v1::CommResult* out = response->add_results();
    v1::Tensor* tensor = out->mutable_tensor();
    tensor->mutable_memory()->set_allocation_id(result.tensor.id.value());
    tensor->mutable_memory()->set_offset(result.tensor.offset);
    tensor->set_dtype(DtypeToProto(result.tensor.dtype));
    tensor->mutable_shape()->Add(result.tensor.shape.begin(), result.tensor.shape.end());
    tensor->set_device(result.tensor.device.value());
    if (result.allocation.has_value()) ToProto(*result.allocation, out->mutable_allocation());
  }
  if (done.event.has_value()) {
    response->set_event(done.event->id.value());
    response->set_event_ipc_handle(done.event->ipc_handle);
    response->set_event_device(done.event_device.value());
  }
}

}  // namespace gpumux
