// CommWork's scatter and gather: their checks (with tensor_chunks.h's
// geometry) and plans, chunk by chunk as strided copies.

#include "server/core/comm_work.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tensor/tensor_chunks.h"

namespace gpumux {
namespace {

using Operand = CommPlan::Operand;

}  // namespace

absl::StatusOr<CommDone> CommWork::Scatter(SessionId session, const CommTensor& tensor,
                                           const std::optional<std::vector<int64_t>>& devices,
                                           const std::optional<std::vector<int64_t>>& chunk_sizes,
                                           int64_t dim, absl::Span<const StreamId> chunk_streams,
                                           const std::optional<std::vector<CommTensor>>& out,
                                           const CommOptions& options) {
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(out.has_value() ? out->size() + 1 : 1));
  GPUMUX_RETURN_IF_ERROR(CheckDeviceCount(devices.has_value() ? devices->size() : 0));
  GPUMUX_RETURN_IF_ERROR(CheckDeviceCount(chunk_sizes.has_value() ? chunk_sizes->size() : 0));
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(chunk_streams.size()));
  if (out.has_value()) {
    if (devices.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'devices' must not be specified when 'out' is specified, but got devices=",
                       PythonList(devices)));
    }
    if (chunk_sizes.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'chunk_sizes' must not be specified when 'out' is specified, but got chunk_sizes=",
          PythonList(chunk_sizes)));
    }
  } else if (!devices.has_value() || devices->empty()) {
    return absl::InvalidArgumentError("Expected at least one device to scatter to");
  }
  GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex source, DeviceOf(session, tensor));
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(tensor));
  const uint64_t element = RngElementSize(tensor.dtype);

  // The chunks' sizes along `dim` and their devices.
  std::vector<int64_t> sizes;
  std::vector<DeviceIndex> targets;
  std::vector<std::optional<size_t>> out_slots;
  CommPlan plan(source);
  const size_t src = plan.Existing(tensor, source, bytes);
  int d = 0;
  if (out.has_value()) {
    if (out->empty())
      return absl::InvalidArgumentError("Expected at least one output tensor to scatter to");
    GPUMUX_ASSIGN_OR_RETURN(d, WrapDim(dim, tensor.shape.size()));
    GPUMUX_RETURN_IF_ERROR(
        CheckHasDims(tensor.shape, "chunk expects at least a 1-dimensional tensor"));
    int64_t total = 0;
    for (size_t i = 0; i < out->size(); ++i) {
      const CommTensor& o = (*out)[i];
      GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex device, DeviceOf(session, o));
      Shape expected = o.shape;
      const bool same_ndim = o.shape.size() == tensor.shape.size();
      if (same_ndim) {
        total += o.shape[static_cast<size_t>(d)];
        expected[static_cast<size_t>(d)] = tensor.shape[static_cast<size_t>(d)];
      }
      if (!same_ndim || expected != tensor.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Output tensor at index ", i, " has incorrect shape: ", FormatShape(o.shape),
            ". Expected same shape except for scatter dim ", d,
            " as the source tensor: ", FormatShape(tensor.shape)));
      }
      if (o.dtype != tensor.dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat("Expected all output tensors to have the source tensor's dtype ",
                         TorchDtypeName(tensor.dtype), ", but output tensor at index ", i,
                         " has dtype ", TorchDtypeName(o.dtype)));
      }
      GPUMUX_ASSIGN_OR_RETURN(const uint64_t out_bytes, CommTensorBytes(o));
      sizes.push_back(o.shape[static_cast<size_t>(d)]);
      targets.push_back(device);
      out_slots.push_back(plan.Existing(o, device, out_bytes));
    }
    if (total != tensor.shape[static_cast<size_t>(d)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Total size for output tensors along scatter dim ", d,
                       " does not match the source tensor size at dim ", d, ". Expected ",
                       tensor.shape[static_cast<size_t>(d)], ", but got total size ", total));
    }
  } else {
    if (chunk_sizes.has_value() && chunk_sizes->size() != devices->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Expected devices and chunk_sizes to be of same length, but got len(devices) = ",
          devices->size(), " and len(chunk_sizes) = ", chunk_sizes->size()));
    }
    GPUMUX_ASSIGN_OR_RETURN(d, WrapDim(dim, tensor.shape.size()));
    GPUMUX_RETURN_IF_ERROR(
        CheckHasDims(tensor.shape, "chunk expects at least a 1-dimensional tensor"));
    const int64_t size = tensor.shape[static_cast<size_t>(d)];
    if (chunk_sizes.has_value()) {
      GPUMUX_RETURN_IF_ERROR(CheckChunkSizes(*chunk_sizes, size));
      sizes = *chunk_sizes;
    } else {
      sizes = ChunkSizes(size, static_cast<int64_t>(devices->size()));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t device = (*devices)[i];
      if (device == source.value()) {
        targets.push_back(source);
      } else {
        GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex target,
                                CheckedDevice(device, memory_->device_count()));
        targets.push_back(target);
      }
      out_slots.push_back(std::nullopt);
    }
  }

  // One stream per device: chunk streams name them.
  CommOptions run_options = options;
  for (size_t i = 0; i < chunk_streams.size() && i < targets.size(); ++i) {
    if (chunk_streams[i].value() == 0) continue;
    for (const auto& [device, stream] : run_options.streams) {
      if (device == targets[i] && stream != chunk_streams[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("scatter runs one stream per device, but chunk ", i, " names stream ",
                         chunk_streams[i].value(), " on device ", device.value(),
                         " where another chunk or "
                         "the options named stream ",
                         stream.value()));
      }
    }
    run_options.streams.emplace_back(targets[i], chunk_streams[i]);
  }

  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Slab slab = NarrowSlab(tensor.shape, element, d, start, sizes[i]);
    CommTensor chunk{AllocationId(0), 0, tensor.dtype, tensor.shape, targets[i]};
    chunk.shape[static_cast<size_t>(d)] = sizes[i];
    start += sizes[i];
    const Operand from{src, slab.offset};
    if (out_slots[i].has_value()) {
      plan.Copy2D(targets[i], Operand{*out_slots[i]}, slab.row_bytes, from, slab.stride,
                  slab.row_bytes, slab.rows);
      plan.AddResult((*out)[i], targets[i]);
      continue;
    }
    const bool contiguous = slab.rows <= 1 || slab.row_bytes == slab.stride;
    if (targets[i] == source && contiguous) {
      chunk.id = tensor.id;  // a view of the input, as PyTorch returns
      chunk.offset = tensor.offset + slab.offset;
      plan.AddResult(chunk, source);
      continue;
    }
    if (std::optional<size_t> slot =
            plan.AddNewResult(chunk, targets[i], slab.row_bytes * slab.rows)) {
      plan.Copy2D(targets[i], Operand{*slot}, slab.row_bytes, from, slab.stride, slab.row_bytes,
                  slab.rows);
    }
  }
  return Run(session, "scatter", plan, run_options);
}

absl::StatusOr<CommDone> CommWork::Gather(SessionId session, absl::Span<const CommTensor> tensors,
                                          int64_t dim,
                                          const std::optional<GatherDestination>& destination,
                                          const std::optional<CommTensor>& out,
                                          const CommOptions& options, std::string* host_bytes) {
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(tensors.size() + 1));
  if (out.has_value() && destination.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'destination' must not be specified when 'out' is specified, but got destination=",
        destination->kind == GatherDestination::Kind::kDevice
            ? absl::StrCat(destination->device.value())
            : "cpu"));
  }
  if (tensors.empty())
    return absl::InvalidArgumentError("Expected at least one tensor to gather from");
  std::vector<DeviceIndex> devices;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    GPUMUX_ASSIGN_OR_RETURN(DeviceIndex device, DeviceOf(session, tensors[i]));
    devices.push_back(device);
    shapes.push_back(tensors[i].shape);
    if (tensors[i].dtype != tensors[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gather expects inputs of one dtype, but tensor at index ", i, " is ",
          TorchDtypeName(tensors[i].dtype), " and tensor 0 is ", TorchDtypeName(tensors[0].dtype)));
    }
  }
  GPUMUX_ASSIGN_OR_RETURN(const int d, WrapDim(dim, tensors[0].shape.size()));
  GPUMUX_RETURN_IF_ERROR(
      CheckHasDims(tensors[0].shape,
                   absl::StrCat("dimension specified as ", dim, " but tensor has no dimensions")));
  GPUMUX_ASSIGN_OR_RETURN(const Shape shape, GatherShape(shapes, d));
  CommTensor gathered{AllocationId(0), 0, tensors[0].dtype, shape, devices[0]};
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(gathered));
  const uint64_t element = RngElementSize(gathered.dtype);

  // Where the pieces go: the caller's `out`, a new result, or scratch memory
  // on the first input's device that is then copied to the host.
  GatherDestination where;
  if (destination.has_value()) where = *destination;
  std::optional<DeviceIndex> target;
  if (out.has_value()) {
    GPUMUX_ASSIGN_OR_RETURN(target, DeviceOf(session, *out));
    if (out->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("Expected out tensor to have shape ",
                                                     FormatShape(shape), ", but got ",
                                                     FormatShape(out->shape)));
    }
    if (out->dtype != gathered.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("Expected out tensor to have dtype ",
                                                     TorchDtypeName(gathered.dtype), ", but got ",
                                                     TorchDtypeName(out->dtype)));
    }
  } else if (where.kind == GatherDestination::Kind::kDevice) {
    GPUMUX_RETURN_IF_ERROR(CheckNonNegative(where.device.value()));
    GPUMUX_RETURN_IF_ERROR(memory_->CheckDevice(where.device));
    target = where.device;
  } else {
    target = devices[0];
    if (where.kind == GatherDestination::Kind::kHostInline && bytes > (uint64_t{64} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("a gather to the host returns at most ",
                                                     uint64_t{64} << 20, " bytes inline, not ",
                                                     bytes, "; use the staging buffer"));
    }
  }
  CommPlan plan(*target);
  std::vector<size_t> slots;
  for (size_t i = 0; i < tensors.size(); ++i) {
    GPUMUX_ASSIGN_OR_RETURN(const uint64_t input_bytes, CommTensorBytes(tensors[i]));
    slots.push_back(plan.Existing(tensors[i], devices[i], input_bytes));
  }
  std::optional<size_t> into;
  CommOptions run_options = options;
  if (out.has_value()) {
    into = plan.Existing(*out, *target, bytes);
    plan.AddResult(*out, *target);
  } else if (where.kind == GatherDestination::Kind::kDevice) {
    gathered.device = *target;
    into = plan.AddNewResult(gathered, *target, bytes);
  } else {
    plan.AddResult(gathered, *target);  // no memory: it tells the shape
    if (bytes > 0) into = plan.Temporary(*target, bytes);
  }
  if (into.has_value()) {
    int64_t start = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int64_t size = tensors[i].shape[static_cast<size_t>(d)];
      const Slab slab = NarrowSlab(shape, element, d, start, size);
      start += size;
      plan.Copy2D(*target, Operand{*into, slab.offset}, slab.stride, Operand{slots[i]},
                  slab.row_bytes, slab.row_bytes, slab.rows);
    }
    if (where.kind == GatherDestination::Kind::kHostInline && !out.has_value()) {
      host_bytes->resize(bytes);
      plan.ToHost(*target, host_bytes->data(), Operand{*into}, bytes, nullptr);
      run_options.wait = true;  // `host_bytes` is only good until the call returns
    } else if (where.kind == GatherDestination::Kind::kHostStaging && !out.has_value()) {
      GPUMUX_ASSIGN_OR_RETURN(StagingBytes staging,
                              staging_->Bytes(session, where.staging_offset, bytes));
      plan.ToHost(*target, staging.data, Operand{*into}, bytes, staging.keep_alive);
    }
  } else if (where.kind == GatherDestination::Kind::kHostStaging && !out.has_value()) {
    GPUMUX_RETURN_IF_ERROR(staging_->Bytes(session, where.staging_offset, 0).status());
  }
  return Run(session, "gather", plan, run_options);
}

}  // namespace gpumux
