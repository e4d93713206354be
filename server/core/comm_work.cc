#include "server/core/comm_work.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

using Operand = CommPlan::Operand;
using AcrossPart = CommPlan::AcrossPart;

}  // namespace

absl::StatusOr<DeviceIndex> CommWork::DeviceOf(SessionId session, const CommTensor& tensor) const {
  return CommTensorDevice(*memory_, session, tensor);
}

bool CommWork::EngineRuns(absl::Span<const DeviceIndex> devices) const {
  if (backend_->collectives() == nullptr || devices.empty()) return false;
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) return false;
    }
  }
  return true;
}

namespace {

// Checks every tensor and adds it to `plan`: its slot and device.
struct Named {
  size_t slot = 0;
  DeviceIndex device;
  uint64_t bytes = 0;
};

}  // namespace

absl::StatusOr<CommDone> CommWork::Run(SessionId session, absl::string_view name, CommPlan& plan,
                                       const CommOptions& options) {
  // Streams, one per device taking part.
  std::vector<ResolvedStream> streams;
  streams.reserve(plan.devices().size());
  // Every stream named is checked, also where its device takes no part.
  for (const auto& [named_device, stream] : options.streams) {
    if (absl::c_linear_search(plan.devices(), named_device)) continue;
    GPUMUX_RETURN_IF_ERROR(memory_->CheckDevice(named_device));
    if (stream.value() != 0) {
      GPUMUX_RETURN_IF_ERROR(streams_->Resolve(session, named_device, stream).status());
    }
  }
  for (DeviceIndex device : plan.devices()) {
    StreamId id(0);
    for (const auto& [named_device, stream] : options.streams) {
      if (named_device == device) id = stream;
    }
    GPUMUX_ASSIGN_OR_RETURN(ResolvedStream resolved, streams_->Resolve(session, device, id));
    streams.push_back(resolved);
  }
  const auto stream_of = [&](DeviceIndex device) -> const ResolvedStream& {
    for (const ResolvedStream& stream : streams) {
      if (stream.device == device) return stream;
    }
    return streams.front();  // unreachable: every step's device took part
  };

  std::optional<EventView> event;
  if (options.completion_event) {
    GPUMUX_ASSIGN_OR_RETURN(
        event, streams_->CreateEvent(session, plan.root(), EventFlags{.interprocess = true}));
  }
  std::vector<AllocationId> results;
  std::vector<AllocationId> temporaries;
  const auto undo = [&](absl::Status status) {
    if (event.has_value()) streams_->DestroyEvent(session, event->id).IgnoreError();
    // Queued work on these is ordered on their own streams: nothing else
    // reuses their blocks before it ran.
    if (!results.empty()) memory_->Free(session, results).IgnoreError();
    if (!temporaries.empty()) memory_->Free(session, temporaries).IgnoreError();
    return status;
  };

  // New memory, each on the stream of its device that writes it.
  for (CommPlan::Slot& slot : plan.slots()) {
    if (slot.kind == CommPlan::SlotKind::kExisting) continue;
    absl::StatusOr<AllocationView> view = memory_->Allocate(
        session, slot.device, stream_of(slot.device).id, slot.range.size, /*shareable=*/false);
    if (!view.ok()) return undo(view.status());
    slot.range.id = view->id;
    slot.allocation = *view;
    (slot.kind == CommPlan::SlotKind::kResult ? results : temporaries).push_back(view->id);
  }

  // The slots with memory; an existing tensor without elements has none.
  std::vector<RangeUse> ranges;
  std::vector<size_t> range_of(plan.slots().size(), 0);
  for (size_t i = 0; i < plan.slots().size(); ++i) {
    const CommPlan::Slot& slot = plan.slots()[i];
    if (slot.range.id.value() == 0) continue;
    range_of[i] = ranges.size();
    ranges.push_back(slot.range);
  }

  const std::vector<DeviceIndex>& devices = plan.devices();
  const auto meet = [&]() -> absl::Status {
    const ResolvedStream& root = streams.front();
    for (size_t i = 1; i < streams.size(); ++i) {
      GPUMUX_RETURN_IF_ERROR(
          streams_->WaitStream(session, root.device, root.id, streams[i].device, streams[i].id));
    }
    for (size_t i = 1; i < streams.size(); ++i) {
      GPUMUX_RETURN_IF_ERROR(
          streams_->WaitStream(session, streams[i].device, streams[i].id, root.device, root.id));
    }
    return absl::OkStatus();
  };
  // Timed on the root's stream, which the others meet at the end.
  uint64_t bytes = 0;
  for (const RangeUse& range : ranges) bytes = std::max(bytes, range.size);
  DeviceProfiler::Work profiled = DeviceProfiler::Begin(
      profiler_, session, name,
      ProfiledSite{streams.front().device, streams.front().id, streams.front().backend}, bytes);
  absl::Status queued = memory_->EnqueueOnAllocations(
      session, ranges, streams, [&](absl::Span<const DeviceSpan> spans) -> absl::Status {
        const auto address = [&](Operand operand) {
          return spans[range_of[operand.slot]].address + operand.offset;
        };
        const auto device = [&](Operand operand) { return plan.DeviceOfSlot(operand.slot); };
        const auto across = [&](const CommPlan::Step& step) -> absl::Status {
          std::vector<CollectivePart> parts;
          for (const AcrossPart& part : step.across) {
            parts.push_back(CollectivePart{part.device, stream_of(part.device).backend,
                                           address(part.send), address(part.recv)});
          }
          CollectiveEngine& engine = *backend_->collectives();  // planned only with one
          switch (step.kind) {
            case CommPlan::Step::Kind::kAllReduceAcross:
              return engine.AllReduce(parts, step.op, step.dtype, step.count);
            case CommPlan::Step::Kind::kBroadcastAcross:
              return engine.Broadcast(parts, step.root, step.count);
            default:
              return engine.Reduce(parts, step.root, step.op, step.dtype, step.count);
          }
        };
        if (devices.size() > 1) GPUMUX_RETURN_IF_ERROR(meet());
        for (const CommPlan::Step& step : plan.steps()) {
          const BackendStream stream = stream_of(step.on).backend;
          switch (step.kind) {
            case CommPlan::Step::Kind::kMeet:
              if (devices.size() > 1) GPUMUX_RETURN_IF_ERROR(meet());
              break;
            case CommPlan::Step::Kind::kCopy:
              GPUMUX_RETURN_IF_ERROR(
                  backend_->CopyDeviceToDevice(stream, device(step.dst), address(step.dst),
                                               device(step.src), address(step.src), step.bytes));
              break;
            case CommPlan::Step::Kind::kCopy2D:
              GPUMUX_RETURN_IF_ERROR(backend_->CopyDeviceToDevice2D(
                  stream, device(step.dst), address(step.dst), step.dst_pitch, device(step.src),
                  address(step.src), step.src_pitch, step.bytes, step.rows));
              break;
            case CommPlan::Step::Kind::kReduce:
              GPUMUX_RETURN_IF_ERROR(backend_->Reduce(stream, step.op, step.dtype,
                                                      address(step.dst), device(step.src),
                                                      address(step.src), step.count));
              break;
            case CommPlan::Step::Kind::kAverage:
              GPUMUX_RETURN_IF_ERROR(backend_->FinishAverage(stream, step.dtype, address(step.dst),
                                                             step.count, step.ranks));
              break;
            case CommPlan::Step::Kind::kToHost:
              GPUMUX_RETURN_IF_ERROR(backend_->CopyDeviceToHost(
                  stream, step.host, address(step.src), step.bytes, step.keep_alive));
              break;
            case CommPlan::Step::Kind::kAllReduceAcross:
            case CommPlan::Step::Kind::kBroadcastAcross:
            case CommPlan::Step::Kind::kReduceAcross:
              GPUMUX_RETURN_IF_ERROR(across(step));
              break;
          }
        }
        if (devices.size() > 1) GPUMUX_RETURN_IF_ERROR(meet());
        DeviceProfiler::Queued(profiled);
        return absl::OkStatus();
      });
  if (!queued.ok()) {
    DeviceProfiler::End(std::move(profiled), false);
    return undo(queued);
  }
  if (!temporaries.empty()) {
    // Recorded on their stream: their blocks wait for the work queued there.
    memory_->Free(session, temporaries).IgnoreError();  // only gone with the session
    temporaries.clear();
  }

  CommDone done;
  const ResolvedStream& root = streams.front();
  if (event.has_value()) {
    absl::Status recorded = streams_->RecordEvent(session, event->id, root.device, root.id);
    absl::StatusOr<std::string> handle =
        recorded.ok() ? streams_->IpcHandle(session, event->id) : recorded;
    if (!handle.ok()) return undo(handle.status());
    done.event = CompletionEvent{event->id, *std::move(handle)};
    done.event_device = root.device;
  }
  if (options.wait) {
    absl::Status waited = backend_->SynchronizeStream(root.backend);
    DeviceProfiler::End(std::move(profiled), true);
    if (!waited.ok()) {
      // The results' memory stays the session's: the work was queued.
      return waited;
    }
  }
  DeviceProfiler::End(std::move(profiled), true);  // a no-op after the wait's
  for (CommPlan::Result& result : plan.results()) {
    CommResult out{result.tensor, std::nullopt};
    if (result.slot.has_value()) {
      const CommPlan::Slot& slot = plan.slots()[*result.slot];
      out.tensor.id = slot.range.id;
      out.allocation = slot.allocation;
    }
    done.results.push_back(std::move(out));
  }
  return done;
}

// ---- broadcast ----

absl::StatusOr<CommDone> CommWork::Broadcast(SessionId session, const CommTensor& tensor,
                                             const std::optional<std::vector<int64_t>>& devices,
                                             const std::optional<std::vector<CommTensor>>& out,
                                             const CommOptions& options) {
  if (devices.has_value() == out.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Exactly one of 'devices' and 'out' must be specified, but got devices=",
        PythonList(devices),
        " and out=", out.has_value() ? absl::StrCat("[", out->size(), " tensors]") : "None"));
  }
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(out.has_value() ? out->size() + 1 : 1));
  if (devices.has_value()) GPUMUX_RETURN_IF_ERROR(CheckDeviceCount(devices->size()));
  // PyTorch reads devices[0] unchecked (undefined behaviour for none).
  if (devices.has_value() && devices->empty()) {
    return absl::InvalidArgumentError(
        "broadcast needs at least one device in 'devices', the source tensor's first");
  }
  GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex source, DeviceOf(session, tensor));
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(tensor));
  CommPlan plan(source);
  const size_t src = plan.Existing(tensor, source, bytes);
  if (devices.has_value()) {
    // The source, then every other device with its new tensor.
    std::vector<AcrossPart> parts{{source, Operand{src}, Operand{src}}};
    for (int64_t d : *devices) {
      GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex device, CheckedDevice(d, memory_->device_count()));
      if (device == source) {
        plan.AddResult(tensor, source);  // the input itself
        continue;
      }
      if (std::optional<size_t> slot = plan.AddNewResult(tensor, device, bytes)) {
        parts.push_back({device, Operand{*slot}, Operand{*slot}});
      }
    }
    AddBroadcast(plan, std::move(parts), bytes);
    return Run(session, "broadcast", plan, options);
  }
  std::vector<Named> targets;
  for (size_t i = 0; i < out->size(); ++i) {
    const CommTensor& o = (*out)[i];
    GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex device, DeviceOf(session, o));
    if (o.shape != tensor.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expected all output tensors to have same shape as the source tensor ",
                       FormatShape(tensor.shape), ", but output tensor at index ", i, " has shape ",
                       FormatShape(o.shape)));
    }
    if (o.dtype != tensor.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expected all output tensors to have the source tensor's dtype ",
                       TorchDtypeName(tensor.dtype), ", but output tensor at index ", i,
                       " has dtype ", TorchDtypeName(o.dtype)));
    }
    targets.push_back(Named{plan.Existing(o, device, bytes), device, bytes});
  }
  std::vector<AcrossPart> parts{{source, Operand{src}, Operand{src}}};
  for (size_t i = 0; i < out->size(); ++i) {
    parts.push_back({targets[i].device, Operand{targets[i].slot}, Operand{targets[i].slot}});
    plan.AddResult((*out)[i], targets[i].device);
  }
  AddBroadcast(plan, std::move(parts), bytes);
  return Run(session, "broadcast", plan, options);
}

absl::StatusOr<CommDone> CommWork::BroadcastCoalesced(SessionId session,
                                                      absl::Span<const CommTensor> tensors,
                                                      absl::Span<const int64_t> devices,
                                                      uint64_t /*buffer_size*/,
                                                      const CommOptions& options) {
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(tensors.size()));
  GPUMUX_RETURN_IF_ERROR(CheckDeviceCount(devices.size()));
  if (devices.empty())
    return absl::InvalidArgumentError("broadcast_coalesced expects at least one device");
  // Results: devices × tensors, which the tensor limit also bounds.
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(devices.size() * std::max<size_t>(tensors.size(), 1)));
  for (int64_t d : devices)
    GPUMUX_RETURN_IF_ERROR(CheckedDevice(d, memory_->device_count()).status());
  const DeviceIndex root(static_cast<int>(devices[0]));
  CommPlan plan(root);
  std::vector<Named> inputs;
  for (const CommTensor& tensor : tensors) {
    GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex device, DeviceOf(session, tensor));
    if (device != root) {
      return absl::InvalidArgumentError(
          absl::StrCat("All tensors must be on devices[0]: ", devices[0]));
    }
    GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(tensor));
    inputs.push_back(Named{plan.Existing(tensor, device, bytes), device, bytes});
  }
  for (const CommTensor& tensor : tensors) plan.AddResult(tensor, root);
  // Results device by device; the broadcasts tensor by tensor.
  std::vector<std::vector<AcrossPart>> parts(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    parts[i].push_back({root, Operand{inputs[i].slot}, Operand{inputs[i].slot}});
  for (size_t d = 1; d < devices.size(); ++d) {
    const DeviceIndex device(static_cast<int>(devices[d]));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (std::optional<size_t> slot = plan.AddNewResult(tensors[i], device, inputs[i].bytes))
        parts[i].push_back({device, Operand{*slot}, Operand{*slot}});
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    AddBroadcast(plan, std::move(parts[i]), inputs[i].bytes);
  return Run(session, "broadcast_coalesced", plan, options);
}

// ---- reduce_add ----

namespace {

// reduce_add's checks: sizes like the first input's, one dtype, and the
// input on `destination` (the last one there, as comm.py's loop leaves it).
absl::StatusOr<size_t> ReduceAddRoot(absl::Span<const CommTensor> inputs,
                                     absl::Span<const DeviceIndex> devices, int64_t destination) {
  if (inputs.empty()) return absl::InvalidArgumentError("reduce_add expects at least one input");
  std::optional<size_t> root;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (devices[i].value() == destination) root = i;
    if (inputs[i].shape != inputs[0].shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " has invalid size: got ", JoinedSizes(inputs[i].shape),
                       ", but expected ", JoinedSizes(inputs[0].shape)));
    }
    if (inputs[i].dtype != inputs[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reduce_add expects inputs of one dtype, but input ", i, " is ",
          TorchDtypeName(inputs[i].dtype), " and input 0 is ", TorchDtypeName(inputs[0].dtype)));
    }
  }
  if (!root.has_value()) {
    return absl::InvalidArgumentError(
        "reduce_add expects destination to be on the same GPU with one of the tensors");
  }
  return *root;
}

}  // namespace

absl::StatusOr<CommDone> CommWork::ReduceAdd(SessionId session, absl::Span<const CommTensor> inputs,
                                             int64_t destination, const CommOptions& options) {
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(inputs.size()));
  std::vector<DeviceIndex> devices;
  for (const CommTensor& input : inputs) {
    GPUMUX_ASSIGN_OR_RETURN(DeviceIndex device, DeviceOf(session, input));
    devices.push_back(device);
  }
  GPUMUX_ASSIGN_OR_RETURN(const size_t root, ReduceAddRoot(inputs, devices, destination));
  const DeviceIndex target = devices[root];
  CommPlan plan(target);
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(inputs[0]));
  std::vector<size_t> slots;
  for (size_t i = 0; i < inputs.size(); ++i)
    slots.push_back(plan.Existing(inputs[i], devices[i], bytes));
  if (inputs.size() == 1) {
    plan.AddResult(inputs[0], devices[0]);  // returned as is
    return Run(session, "reduce_add", plan, options);
  }
  if (std::optional<size_t> result = plan.AddNewResult(inputs[root], target, bytes))
    AddReduceAdd(plan, devices, slots, root, *result, inputs[0].dtype, bytes);
  return Run(session, "reduce_add", plan, options);
}

void CommWork::AddReduce(CommPlan& plan, DeviceIndex on, ReduceOp op, RngDtype dtype,
                         const Operand& dst, const Operand& src, uint64_t bytes) {
  const uint64_t count = bytes / RngElementSize(dtype);
  if (backend_->CanReadPeer(on, plan.DeviceOfSlot(src.slot))) {
    plan.Reduce(on, op, dtype, dst, src, count);
    return;
  }
  const size_t scratch = plan.Temporary(on, bytes);
  plan.Copy(on, Operand{scratch}, src, bytes);
  plan.Reduce(on, op, dtype, dst, Operand{scratch}, count);
}

void CommWork::AddBroadcast(CommPlan& plan, std::vector<AcrossPart> parts, uint64_t bytes) {
  if (parts.size() < 2 || bytes == 0) return;
  std::vector<DeviceIndex> devices;
  for (const AcrossPart& part : parts) devices.push_back(part.device);
  if (EngineRuns(devices)) {
    plan.Across(CommPlan::Step::Kind::kBroadcastAcross, std::move(parts), 0, ReduceOp::kSum,
                RngDtype::kU8, bytes);
    return;
  }
  for (size_t i = 1; i < parts.size(); ++i)
    plan.Copy(parts[i].device, parts[i].recv, parts[0].send, bytes);
}

void CommWork::AddReduceAdd(CommPlan& plan, absl::Span<const DeviceIndex> devices,
                            absl::Span<const size_t> slots, size_t root, size_t result,
                            RngDtype dtype, uint64_t bytes) {
  const DeviceIndex target = devices[root];
  if (EngineRuns(devices)) {
    std::vector<AcrossPart> parts;
    for (size_t i = 0; i < slots.size(); ++i) {
      parts.push_back({devices[i], Operand{slots[i]}, Operand{i == root ? result : slots[i]}});
    }
    plan.Across(CommPlan::Step::Kind::kReduceAcross, std::move(parts), root, ReduceOp::kSum, dtype,
                bytes / RngElementSize(dtype));
    return;
  }
  plan.Copy(target, Operand{result}, Operand{slots[root]}, bytes);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i == root) continue;
    AddReduce(plan, target, ReduceOp::kSum, dtype, Operand{result}, Operand{slots[i]}, bytes);
  }
}

absl::StatusOr<CommDone> CommWork::ReduceAddCoalesced(
    SessionId session, absl::Span<const std::vector<CommTensor>> inputs, int64_t destination,
    uint64_t /*buffer_size*/, const CommOptions& options) {
  size_t total = 0;
  for (const std::vector<CommTensor>& list : inputs) total += list.size();
  GPUMUX_RETURN_IF_ERROR(CheckTensorCount(total));
  if (inputs.empty())
    return absl::InvalidArgumentError("reduce_add_coalesced expects at least one list of inputs");
  for (size_t g = 1; g < inputs.size(); ++g) {
    if (inputs[g].size() != inputs[0].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce_add_coalesced expects as many tensors on every GPU, but list ", g,
                       " has ", inputs[g].size(), " and list 0 has ", inputs[0].size()));
    }
  }
  GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex target,
                          CheckedDevice(destination, memory_->device_count()));
  CommPlan plan(target);
  for (size_t j = 0; j < inputs[0].size(); ++j) {
    std::vector<CommTensor> column;
    std::vector<DeviceIndex> devices;
    for (const std::vector<CommTensor>& list : inputs) {
      GPUMUX_ASSIGN_OR_RETURN(DeviceIndex device, DeviceOf(session, list[j]));
      column.push_back(list[j]);
      devices.push_back(device);
    }
    GPUMUX_ASSIGN_OR_RETURN(const size_t root, ReduceAddRoot(column, devices, destination));
    GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(column[0]));
    std::vector<size_t> slots;
    for (size_t i = 0; i < column.size(); ++i)
      slots.push_back(plan.Existing(column[i], devices[i], bytes));
    std::optional<size_t> result = plan.AddNewResult(column[root], target, bytes);
    if (result.has_value())
      AddReduceAdd(plan, devices, slots, root, *result, column[0].dtype, bytes);
  }
  return Run(session, "reduce_add_coalesced", plan, options);
}

// ---- scatter ----

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

// ---- gather ----

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

// ---- all_reduce ----

absl::StatusOr<CommDone> CommWork::AllReduce(SessionId session, absl::Span<const CommTensor> inputs,
                                             const std::optional<std::vector<CommTensor>>& outputs,
                                             ReduceOp op, const CommOptions& options) {
  GPUMUX_RETURN_IF_ERROR(
      CheckTensorCount(inputs.size() + (outputs.has_value() ? outputs->size() : 0)));
  if (inputs.empty()) return absl::InvalidArgumentError("input sequence can't be empty");
  if (outputs.has_value() && outputs->size() != inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs and outputs sequences have to be of the same length, but got input of length ",
        inputs.size(), " and output of length ", outputs->size()));
  }
  const std::vector<CommTensor>& targets =
      outputs.has_value() ? *outputs : std::vector<CommTensor>(inputs.begin(), inputs.end());
  std::vector<DeviceIndex> devices;
  const RngDtype dtype = inputs[0].dtype;
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(inputs[0]));
  for (size_t i = 0; i < inputs.size(); ++i) {
    GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex device, DeviceOf(session, inputs[i]));
    if (inputs[i].dtype != dtype || targets[i].dtype != dtype) {
      return absl::InvalidArgumentError("all inputs and outputs must be of the same Tensor dtype");
    }
    GPUMUX_ASSIGN_OR_RETURN(const uint64_t input_bytes, CommTensorBytes(inputs[i]));
    if (input_bytes != bytes)
      return absl::InvalidArgumentError("all inputs must have the same number of elements");
    if (outputs.has_value()) {
      GPUMUX_ASSIGN_OR_RETURN(const DeviceIndex out_device, DeviceOf(session, targets[i]));
      if (out_device != device)
        return absl::InvalidArgumentError("input and output must be on the same device");
      GPUMUX_ASSIGN_OR_RETURN(const uint64_t out_bytes, CommTensorBytes(targets[i]));
      if (out_bytes != bytes) {
        return absl::InvalidArgumentError("output must be of size input_size * size_multiplier");
      }
    }
    if (std::find(devices.begin(), devices.end(), device) != devices.end())
      return absl::InvalidArgumentError("inputs must be on unique devices");
    devices.push_back(device);
  }
  CommPlan plan(devices[0]);
  std::vector<size_t> in_slots;
  std::vector<size_t> out_slots;
  for (size_t i = 0; i < inputs.size(); ++i)
    in_slots.push_back(plan.Existing(inputs[i], devices[i], bytes));
  if (outputs.has_value()) {
    for (size_t i = 0; i < inputs.size(); ++i)
      out_slots.push_back(plan.Existing(targets[i], devices[i], bytes));
  } else {
    out_slots = in_slots;
  }
  for (size_t i = 0; i < targets.size(); ++i) plan.AddResult(targets[i], devices[i]);
  if (EngineRuns(devices)) {
    std::vector<AcrossPart> parts;
    for (size_t i = 0; i < inputs.size(); ++i)
      parts.push_back({devices[i], Operand{in_slots[i]}, Operand{out_slots[i]}});
    plan.Across(CommPlan::Step::Kind::kAllReduceAcross, std::move(parts), 0, op, dtype,
                bytes / RngElementSize(dtype));
    return Run(session, "all_reduce", plan, options);
  }
  // Reduce into the first output on the first device, in input order, then
  // copy the result to every other output once the streams met again.
  const Operand acc{out_slots[0]};
  const bool in_place = !outputs.has_value() ||
                        (targets[0].id == inputs[0].id && targets[0].offset == inputs[0].offset);
  if (!in_place) plan.Copy(devices[0], acc, Operand{in_slots[0]}, bytes);
  for (size_t i = 1; i < inputs.size(); ++i)
    AddReduce(plan, devices[0], op, dtype, acc, Operand{in_slots[i]}, bytes);
  if (op == ReduceOp::kAvg) {
    plan.Average(devices[0], dtype, acc, bytes / RngElementSize(dtype),
                 static_cast<int>(inputs.size()));
  }
  plan.Meet();
  for (size_t i = 1; i < inputs.size(); ++i)
    plan.Copy(devices[i], Operand{out_slots[i]}, acc, bytes);
  return Run(session, "all_reduce", plan, options);
}

}  // namespace gpumux
