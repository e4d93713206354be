// CommWork's broadcast and broadcast_coalesced: their checks and plans, and
// AddBroadcast, the plan of one tensor's broadcast that both build on.

#include "server/core/comm_work.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

using Operand = CommPlan::Operand;
using AcrossPart = CommPlan::AcrossPart;

// A tensor the caller named, as the plan holds it: its slot, device and size.
struct Named {
  size_t slot = 0;
  DeviceIndex device;
  uint64_t bytes = 0;
};

}  // namespace

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

}  // namespace gpumux
