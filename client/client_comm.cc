// Client's collectives (the Comm service): torch.cuda.comm's functions and
// torch.cuda.nccl.all_reduce. The daemon checks every argument with
// PyTorch's messages; this side names the tensors, picks the streams (the
// calling thread's current ones, as PyTorch's comm uses), and turns the
// results into buffers the caller owns or finds its own memory in them.

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "gpumux/comm.h"
#include "gpumux/copy.h"
#include "gpumux/nccl.h"

namespace gpumux {
namespace {

Dtype DtypeFromProto(v1::Dtype dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT64:
      return Dtype::kFloat64;
    case v1::DTYPE_FLOAT16:
      return Dtype::kFloat16;
    case v1::DTYPE_BFLOAT16:
      return Dtype::kBFloat16;
    case v1::DTYPE_INT32:
      return Dtype::kInt32;
    case v1::DTYPE_INT64:
      return Dtype::kInt64;
    case v1::DTYPE_UINT8:
      return Dtype::kUInt8;
    default:
      return Dtype::kFloat32;
  }
}

// Elements of `shape`, saturating (the daemon refuses what overflows).
uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t size : shape) {
    if (size <= 0) return 0;
    const auto n = static_cast<uint64_t>(size);
    count = count > UINT64_MAX / n ? UINT64_MAX : count * n;
  }
  return count;
}

// scatter's per-chunk streams against the devices, as comm.cpp checks them.
absl::Status CheckChunkStreams(absl::Span<const std::optional<Stream>> streams,
                               absl::Span<const int64_t> devices) {
  for (size_t i = 0; i < streams.size() && i < devices.size(); ++i) {
    if (!streams[i].has_value()) continue;
    if (streams[i]->device().value() != devices[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expected the device associated with the stream at index ", i, " (was ",
                       streams[i]->device().value(),
                       ") to match the device supplied at that index (expected ", devices[i], ")"));
    }
  }
  return absl::OkStatus();
}

// scatter's per-chunk streams into `request` (0 for none); the options
// with those streams added, so that they are the chunks' streams.
CollectiveOptions WithChunkStreams(v1::ScatterRequest& request,
                                   absl::Span<const std::optional<Stream>> streams,
                                   const CollectiveOptions& options) {
  CollectiveOptions with_streams = options;
  for (const std::optional<Stream>& stream : streams) {
    request.add_chunk_streams(stream.has_value() ? stream->id().value() : 0);
    if (stream.has_value()) with_streams.streams.push_back(*stream);
  }
  return with_streams;
}

}  // namespace

uint64_t ResultTensor::bytes() const {
  const uint64_t elements = Elements(shape);
  return elements > UINT64_MAX / DtypeSize(dtype) ? UINT64_MAX : elements * DtypeSize(dtype);
}

absl::Status Client::Impl::SetTensor(v1::Tensor* out, const TensorRef& tensor,
                                     absl::string_view role, CommCall& call) const {
  out->set_dtype(ToProto(tensor.dtype));
  out->mutable_shape()->Add(tensor.shape.begin(), tensor.shape.end());
  DeviceIndex device = tensor.device;
  if (tensor.buffer == nullptr || !tensor.buffer->valid()) {
    if (Elements(tensor.shape) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", role, " has elements but no buffer (an empty DeviceBuffer)"));
    }
    out->set_device(device.value());
  } else {
    const DeviceBuffer& buffer = *tensor.buffer;
    if (buffer.client_ != &self_) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", role, "'s buffer belongs to another Client"));
    }
    // The daemon checks the bytes against the allocation; a local block is
    // checked here against the block, which the daemon cannot see.
    const uint64_t bytes = Elements(tensor.shape) * DtypeSize(tensor.dtype);
    GPUMUX_RETURN_IF_ERROR(
        SetRange(out->mutable_memory(), buffer, tensor.offset, buffer.local_ ? bytes : 0, role));
    device = buffer.device();
  }
  call.named.push_back(&tensor);
  AddCommDevice(call, device.value());
  return absl::OkStatus();
}

absl::Status Client::Impl::SetTensors(google::protobuf::RepeatedPtrField<v1::Tensor>* out,
                                      absl::Span<const TensorRef> tensors, absl::string_view role,
                                      CommCall& call) const {
  for (const TensorRef& tensor : tensors) {
    GPUMUX_RETURN_IF_ERROR(SetTensor(out->Add(), tensor, role, call));
  }
  return absl::OkStatus();
}

void Client::Impl::AddCommDevices(google::protobuf::RepeatedField<int64_t>* out,
                                  absl::Span<const int64_t> devices, CommCall& call) {
  for (int64_t device : devices) {
    out->Add(device);
    AddCommDevice(call, device);
  }
}

void Client::Impl::AddCommDevice(CommCall& call, int64_t device) {
  if (device < 0 || device > INT32_MAX) return;  // the daemon says what is wrong with it
  const DeviceIndex index(static_cast<int>(device));
  if (std::find(call.devices.begin(), call.devices.end(), index) == call.devices.end())
    call.devices.push_back(index);
}

absl::Status Client::Impl::SetCommOptions(v1::CommOptions* proto, const CollectiveOptions& options,
                                          CommCall& call) {
  for (const Stream& stream : options.streams) {
    if (stream.client() != &self_) {
      return absl::InvalidArgumentError(absl::StrCat("stream ", ToString(stream.id()),
                                                     " of device ", stream.device().value(),
                                                     " belongs to another Client"));
    }
  }
  call.streams.clear();
  for (DeviceIndex device : call.devices) {
    std::optional<Stream> chosen;
    for (const Stream& stream : options.streams) {
      if (stream.device() == device) chosen = stream;
    }
    const Stream stream = chosen.has_value() ? *chosen : self_.CurrentStream(device);
    if (!stream.is_default()) (*proto->mutable_streams())[device.value()] = stream.id().value();
    call.streams.push_back(stream);
  }
  // Streams named for devices that take no part still reach the daemon,
  // which checks them.
  for (const Stream& stream : options.streams) {
    if (std::find(call.devices.begin(), call.devices.end(), stream.device()) == call.devices.end())
      (*proto->mutable_streams())[stream.device().value()] = stream.id().value();
  }
  proto->set_wait(options.wait);
  proto->set_completion_event(options.completion_event);
  proto->set_async_op(options.async_op);
  return absl::OkStatus();
}

absl::StatusOr<CollectiveResult> Client::Impl::RunCollective(
    CommCall& call, bool waited,
    absl::FunctionRef<grpc::Status(grpc::ClientContext*, v1::CommResponse*)> rpc) {
  FlushFreesBeforeCall();  // results may reuse what the caller freed
  v1::CommResponse response;
  GPUMUX_RETURN_IF_ERROR(
      CallWithSession([&](grpc::ClientContext* context) { return rpc(context, &response); }));
  const auto stream_of = [&](DeviceIndex device) {
    for (const Stream& stream : call.streams) {
      if (stream.device() == device) return stream;
    }
    return self_.CurrentStream(device);
  };
  for (const TensorRef* tensor : call.named) {
    if (tensor->buffer != nullptr && tensor->buffer->valid()) {
      NoteDaemonWork(*tensor->buffer, stream_of(tensor->buffer->device()), waited);
    }
  }
  CollectiveResult result;
  // Adopt every new allocation first, so that none leaks if one fails.
  std::vector<absl::StatusOr<DeviceBuffer>> adopted;
  for (const v1::CommResult& r : response.results()) {
    if (r.has_allocation()) adopted.push_back(Adopt(r.allocation()));
  }
  size_t next = 0;
  for (const v1::CommResult& r : response.results()) {
    ResultTensor tensor;
    tensor.dtype = DtypeFromProto(r.tensor().dtype());
    tensor.shape.assign(r.tensor().shape().begin(), r.tensor().shape().end());
    tensor.device = DeviceIndex(r.tensor().device());
    const uint64_t id = r.tensor().memory().allocation_id();
    const uint64_t offset = r.tensor().memory().offset();
    if (r.has_allocation()) {
      absl::StatusOr<DeviceBuffer>& buffer = adopted[next++];
      if (!buffer.ok()) return buffer.status();
      tensor.owned = *std::move(buffer);
      tensor.offset = offset;
    } else if (id != 0) {
      // The caller's own memory: the named buffer it lies in.
      for (const TensorRef* named : call.named) {
        const DeviceBuffer* buffer = named->buffer;
        if (buffer == nullptr || !buffer->valid()) continue;
        const uint64_t wire_id = buffer->local_ ? buffer->lease_.value() : buffer->id().value();
        const uint64_t start = buffer->local_ ? buffer->offset() : 0;
        if (wire_id == id && offset >= start && offset - start <= buffer->size()) {
          tensor.borrowed = buffer;
          tensor.offset = offset - start;
          break;
        }
      }
      if (tensor.borrowed == nullptr) {
        return absl::InternalError(absl::StrCat("the daemon's result names allocation ", id,
                                                " at offset ", offset,
                                                ", which no tensor of the call holds"));
      }
    }
    result.tensors.push_back(std::move(tensor));
  }
  result.completion = AdoptCompletionEvent(DeviceIndex(response.event_device()), response.event(),
                                           std::move(*response.mutable_event_ipc_handle()));
  return result;
}

// ---- The calls ----

absl::StatusOr<CollectiveResult> comm::Broadcast(Client& client, const TensorRef& tensor,
                                                 absl::Span<const int64_t> devices,
                                                 const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::Broadcast");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::BroadcastRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_tensor(), tensor, "tensor", call));
  // The list is present even when empty.
  Client::Impl::AddCommDevices(request.mutable_devices()->mutable_devices(), devices, call);
  return impl.Collective(call, request, options, &v1::Comm::Stub::Broadcast);
}

absl::StatusOr<CollectiveResult> comm::BroadcastOut(Client& client, const TensorRef& tensor,
                                                    absl::Span<const TensorRef> out,
                                                    const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::BroadcastOut");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::BroadcastRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_tensor(), tensor, "tensor", call));
  GPUMUX_RETURN_IF_ERROR(
      impl.SetTensors(request.mutable_out()->mutable_tensors(), out, "output tensor", call));
  return impl.Collective(call, request, options, &v1::Comm::Stub::Broadcast);
}

absl::StatusOr<CollectiveResult> comm::BroadcastCoalesced(Client& client,
                                                          absl::Span<const TensorRef> tensors,
                                                          absl::Span<const int64_t> devices,
                                                          uint64_t buffer_size,
                                                          const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::BroadcastCoalesced");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::BroadcastCoalescedRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensors(request.mutable_tensors(), tensors, "tensor", call));
  Client::Impl::AddCommDevices(request.mutable_devices(), devices, call);
  request.set_buffer_size(buffer_size);
  return impl.Collective(call, request, options, &v1::Comm::Stub::BroadcastCoalesced);
}

absl::StatusOr<CollectiveResult> comm::ReduceAdd(Client& client, absl::Span<const TensorRef> inputs,
                                                 std::optional<DeviceIndex> destination,
                                                 const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::ReduceAdd");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::ReduceAddRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensors(request.mutable_inputs(), inputs, "input", call));
  const DeviceIndex target = destination.value_or(client.CurrentDevice());
  request.set_destination(target.value());
  Client::Impl::AddCommDevice(call, target.value());
  return impl.Collective(call, request, options, &v1::Comm::Stub::ReduceAdd);
}

absl::StatusOr<CollectiveResult> comm::ReduceAddCoalesced(
    Client& client, absl::Span<const std::vector<TensorRef>> inputs,
    std::optional<DeviceIndex> destination, uint64_t buffer_size,
    const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::ReduceAddCoalesced");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::ReduceAddCoalescedRequest request;
  for (const std::vector<TensorRef>& list : inputs) {
    GPUMUX_RETURN_IF_ERROR(
        impl.SetTensors(request.add_inputs()->mutable_tensors(), list, "input", call));
  }
  const DeviceIndex target = destination.value_or(client.CurrentDevice());
  request.set_destination(target.value());
  Client::Impl::AddCommDevice(call, target.value());
  request.set_buffer_size(buffer_size);
  return impl.Collective(call, request, options, &v1::Comm::Stub::ReduceAddCoalesced);
}

absl::StatusOr<CollectiveResult> comm::Scatter(
    Client& client, const TensorRef& tensor, absl::Span<const int64_t> devices,
    const std::optional<std::vector<int64_t>>& chunk_sizes, int64_t dim,
    absl::Span<const std::optional<Stream>> streams, const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::Scatter");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  GPUMUX_RETURN_IF_ERROR(CheckChunkStreams(streams, devices));
  Client::Impl::CommCall call;
  v1::ScatterRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_tensor(), tensor, "tensor", call));
  // The list is present even when empty.
  Client::Impl::AddCommDevices(request.mutable_devices()->mutable_devices(), devices, call);
  if (chunk_sizes.has_value()) {
    request.mutable_chunk_sizes()->mutable_sizes()->Add(chunk_sizes->begin(), chunk_sizes->end());
  }
  request.set_dim(dim);
  return impl.Collective(call, request, WithChunkStreams(request, streams, options),
                         &v1::Comm::Stub::Scatter);
}

absl::StatusOr<CollectiveResult> comm::ScatterOut(Client& client, const TensorRef& tensor,
                                                  absl::Span<const TensorRef> out, int64_t dim,
                                                  absl::Span<const std::optional<Stream>> streams,
                                                  const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::ScatterOut");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  std::vector<int64_t> devices;
  for (const TensorRef& o : out) {
    devices.push_back(o.buffer != nullptr && o.buffer->valid() ? o.buffer->device().value()
                                                               : o.device.value());
  }
  GPUMUX_RETURN_IF_ERROR(CheckChunkStreams(streams, devices));
  Client::Impl::CommCall call;
  v1::ScatterRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_tensor(), tensor, "tensor", call));
  GPUMUX_RETURN_IF_ERROR(
      impl.SetTensors(request.mutable_out()->mutable_tensors(), out, "output tensor", call));
  request.set_dim(dim);
  return impl.Collective(call, request, WithChunkStreams(request, streams, options),
                         &v1::Comm::Stub::Scatter);
}

absl::StatusOr<CollectiveResult> comm::Gather(Client& client, absl::Span<const TensorRef> tensors,
                                              int64_t dim, std::optional<DeviceIndex> destination,
                                              const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::Gather");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::GatherRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensors(request.mutable_tensors(), tensors, "input tensor", call));
  request.set_dim(dim);
  const DeviceIndex target = destination.value_or(client.CurrentDevice());
  request.set_device(target.value());
  Client::Impl::AddCommDevice(call, target.value());
  return impl.Collective(call, request, options, &v1::Comm::Stub::Gather);
}

absl::StatusOr<CollectiveResult> comm::GatherToHost(Client& client,
                                                    absl::Span<const TensorRef> tensors, void* dst,
                                                    uint64_t dst_size, int64_t dim,
                                                    const CollectiveOptions& options,
                                                    TransferPath path) {
  GPUMUX_PROFILED_WAIT("comm::GatherToHost");
  auto& impl = ImplOf(client);
  if (dst == nullptr && dst_size != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("host pointer is null for ", dst_size, " bytes"));
  Client::Impl::CommCall call;
  v1::GatherRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensors(request.mutable_tensors(), tensors, "input tensor", call));
  request.set_dim(dim);
  const auto check_size = [dst_size](uint64_t bytes) -> absl::Status {
    if (bytes == dst_size) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("the gathered tensor has ", bytes, " bytes, but the host buffer ", dst_size));
  };
  CollectiveOptions waiting = options;
  waiting.wait = true;  // `dst` holds the bytes when the call returns
  if (!impl.UseStaging(path, dst_size) && dst_size <= kMaxInlineCopyBytes) {
    request.set_host_inline(true);
    GPUMUX_RETURN_IF_ERROR(impl.SetCommOptions(request.mutable_options(), waiting, call));
    std::string bytes;
    GPUMUX_ASSIGN_OR_RETURN(
        CollectiveResult result,
        impl.RunCollective(
            call, true, [&](grpc::ClientContext* context, v1::CommResponse* response) {
              grpc::Status status = impl.comm_stub_->Gather(context, request, response);
              bytes = std::move(*response->mutable_host_data());
              return status;
            }));
    GPUMUX_RETURN_IF_ERROR(check_size(bytes.size()));
    if (!bytes.empty()) std::memcpy(dst, bytes.data(), bytes.size());
    return result;
  }
  {
    absl::MutexLock lock(&impl.staging_mu_);
    GPUMUX_ASSIGN_OR_RETURN(StagingBuffer * staging, impl.StagingLocked());
    if (dst_size <= staging->size()) {
      // The daemon writes the buffer: nothing queued may still read it.
      GPUMUX_RETURN_IF_ERROR(staging->WaitAll([&impl] { return impl.CheckSession(); }));
      request.set_host_staging_offset(0);
      GPUMUX_ASSIGN_OR_RETURN(CollectiveResult result,
                              impl.Collective(call, request, waiting, &v1::Comm::Stub::Gather));
      if (result.tensors.size() != 1) {
        return absl::InternalError(absl::StrCat("the daemon's gather to the host answered ",
                                                result.tensors.size(), " results, not 1"));
      }
      GPUMUX_RETURN_IF_ERROR(check_size(result.tensors[0].bytes()));
      if (dst_size != 0) std::memcpy(dst, staging->data(), dst_size);
      return result;
    }
  }
  // Larger than the staging buffer: gathered on the first input's device,
  // then copied out in staging-sized pieces.
  const DeviceIndex first =
      tensors.empty() || tensors[0].buffer == nullptr || !tensors[0].buffer->valid()
          ? (tensors.empty() ? client.CurrentDevice() : tensors[0].device)
          : tensors[0].buffer->device();
  GPUMUX_ASSIGN_OR_RETURN(CollectiveResult gathered,
                          comm::Gather(client, tensors, dim, first, options));
  const ResultTensor& tensor = gathered.tensors.at(0);
  GPUMUX_RETURN_IF_ERROR(check_size(tensor.bytes()));
  CopyOptions copy_options;
  copy_options.path = path;
  copy_options.completion_event = options.completion_event;
  if (!options.streams.empty()) {
    for (const Stream& stream : options.streams) {
      if (stream.device() == first) copy_options.stream = stream;
    }
  }
  GPUMUX_ASSIGN_OR_RETURN(
      Event completion,
      copy::DeviceToHost(client, dst, *tensor.buffer(), tensor.offset, dst_size, copy_options));
  CollectiveResult result;
  ResultTensor shape_only;
  shape_only.dtype = tensor.dtype;
  shape_only.shape = tensor.shape;
  shape_only.device = tensor.device;
  result.tensors.push_back(std::move(shape_only));
  result.completion = std::move(completion);
  return result;  // the device copy is freed with `gathered`
}

absl::StatusOr<CollectiveResult> comm::GatherOut(Client& client,
                                                 absl::Span<const TensorRef> tensors,
                                                 const TensorRef& out, int64_t dim,
                                                 const CollectiveOptions& options) {
  GPUMUX_PROFILED("comm::GatherOut");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::GatherRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensors(request.mutable_tensors(), tensors, "input tensor", call));
  GPUMUX_RETURN_IF_ERROR(impl.SetTensor(request.mutable_out(), out, "output tensor", call));
  request.set_dim(dim);
  return impl.Collective(call, request, options, &v1::Comm::Stub::Gather);
}

absl::StatusOr<CollectiveResult> nccl::AllReduce(Client& client,
                                                 absl::Span<const TensorRef> tensors, ReduceOp op,
                                                 const CollectiveOptions& options) {
  GPUMUX_PROFILED("nccl::AllReduce");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::AllReduceRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensors(request.mutable_inputs(), tensors, "input", call));
  request.set_op(ToProto(op));
  return impl.Collective(call, request, options, &v1::Comm::Stub::AllReduce);
}

absl::StatusOr<CollectiveResult> nccl::AllReduceOut(Client& client,
                                                    absl::Span<const TensorRef> inputs,
                                                    absl::Span<const TensorRef> outputs,
                                                    ReduceOp op, const CollectiveOptions& options) {
  GPUMUX_PROFILED("nccl::AllReduceOut");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  Client::Impl::CommCall call;
  v1::AllReduceRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetTensors(request.mutable_inputs(), inputs, "input", call));
  GPUMUX_RETURN_IF_ERROR(
      impl.SetTensors(request.mutable_outputs()->mutable_tensors(), outputs, "output", call));
  request.set_op(ToProto(op));
  return impl.Collective(call, request, options, &v1::Comm::Stub::AllReduce);
}

}  // namespace gpumux
