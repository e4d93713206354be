// CommWork's reductions: reduce_add, reduce_add_coalesced and all_reduce,
// their checks and plans, and the reduction steps they share (AddReduce,
// AddReduceAdd).

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
