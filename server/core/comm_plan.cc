#include "server/core/comm_plan.h"

#include <algorithm>
#include <utility>

namespace gpumux {

size_t CommPlan::Existing(const CommTensor& tensor, DeviceIndex device, uint64_t bytes) {
  AddDevice(device);
  slots_.push_back(
      Slot{SlotKind::kExisting, device, RangeUse{tensor.id, tensor.offset, bytes}, std::nullopt});
  return slots_.size() - 1;
}

size_t CommPlan::NewResult(DeviceIndex device, uint64_t bytes) {
  AddDevice(device);
  slots_.push_back(
      Slot{SlotKind::kResult, device, RangeUse{AllocationId(0), 0, bytes}, std::nullopt});
  return slots_.size() - 1;
}

size_t CommPlan::Temporary(DeviceIndex device, uint64_t bytes) {
  AddDevice(device);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.kind == SlotKind::kTemporary && slot.device == device) {
      slot.range.size = std::max(slot.range.size, bytes);
      return i;
    }
  }
  slots_.push_back(
      Slot{SlotKind::kTemporary, device, RangeUse{AllocationId(0), 0, bytes}, std::nullopt});
  return slots_.size() - 1;
}

void CommPlan::Meet() { steps_.push_back(Step{.kind = Step::Kind::kMeet}); }

void CommPlan::Copy(DeviceIndex on, Operand dst, Operand src, uint64_t bytes) {
  if (bytes == 0) return;
  AddDevice(on);
  steps_.push_back(
      Step{.kind = Step::Kind::kCopy, .on = on, .dst = dst, .src = src, .bytes = bytes});
}

void CommPlan::Copy2D(DeviceIndex on, Operand dst, uint64_t dst_pitch, Operand src,
                      uint64_t src_pitch, uint64_t row_bytes, uint64_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  if (rows == 1 || (dst_pitch == row_bytes && src_pitch == row_bytes)) {
    return Copy(on, dst, src, row_bytes * rows);  // contiguous after all
  }
  AddDevice(on);
  steps_.push_back(Step{.kind = Step::Kind::kCopy2D,
                        .on = on,
                        .dst = dst,
                        .src = src,
                        .bytes = row_bytes,
                        .rows = rows,
                        .dst_pitch = dst_pitch,
                        .src_pitch = src_pitch});
}

void CommPlan::Reduce(DeviceIndex on, ReduceOp op, RngDtype dtype, Operand dst, Operand src,
                      uint64_t count) {
  if (count == 0) return;
  AddDevice(on);
  steps_.push_back(Step{.kind = Step::Kind::kReduce,
                        .on = on,
                        .dst = dst,
                        .src = src,
                        .op = op,
                        .dtype = dtype,
                        .count = count});
}

void CommPlan::Average(DeviceIndex on, RngDtype dtype, Operand data, uint64_t count, int ranks) {
  if (count == 0 || ranks <= 1) return;
  AddDevice(on);
  steps_.push_back(Step{.kind = Step::Kind::kAverage,
                        .on = on,
                        .dst = data,
                        .dtype = dtype,
                        .count = count,
                        .ranks = ranks});
}

void CommPlan::ToHost(DeviceIndex on, void* host, Operand src, uint64_t bytes,
                      std::shared_ptr<void> keep_alive) {
  if (bytes == 0) return;
  AddDevice(on);
  steps_.push_back(Step{.kind = Step::Kind::kToHost,
                        .on = on,
                        .src = src,
                        .bytes = bytes,
                        .host = host,
                        .keep_alive = std::move(keep_alive)});
}

void CommPlan::Across(Step::Kind kind, std::vector<AcrossPart> parts, size_t root, ReduceOp op,
                      RngDtype dtype, uint64_t count) {
  if (count == 0) return;
  for (const AcrossPart& part : parts) AddDevice(part.device);
  const DeviceIndex on = parts[root].device;
  steps_.push_back(Step{.kind = kind,
                        .on = on,
                        .op = op,
                        .dtype = dtype,
                        .count = count,
                        .across = std::move(parts),
                        .root = root});
}

void CommPlan::AddResult(CommTensor tensor, DeviceIndex device) {
  tensor.device = device;
  results_.push_back(Result{std::move(tensor), std::nullopt});
}

std::optional<size_t> CommPlan::AddNewResult(const CommTensor& like, DeviceIndex device,
                                             uint64_t bytes) {
  CommTensor tensor{AllocationId(0), 0, like.dtype, like.shape, device};
  if (bytes == 0) {
    results_.push_back(Result{tensor, std::nullopt});
    return std::nullopt;
  }
  const size_t slot = NewResult(device, bytes);
  results_.push_back(Result{tensor, slot});
  return slot;
}

void CommPlan::AddDevice(DeviceIndex device) {
  if (std::find(devices_.begin(), devices_.end(), device) == devices_.end())
    devices_.push_back(device);
}

}  // namespace gpumux
