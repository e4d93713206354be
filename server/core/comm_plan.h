#pragma once

// CommPlan: one collective's memory and steps, built (and so checked) before
// anything is allocated or queued. Its slots are the tensors the caller named
// and the new memory the collective needs (results and per-device scratch
// memory); its steps are copies, reductions and engine collectives between
// slots, each on one device's stream. CommWork's planners fill a plan and
// CommWork::Run carries it out. Thread-compatible: a plan belongs to one call.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/tensor/rng_fill.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/reduce_op.h"
#include "server/core/comm_tensor.h"
#include "server/core/memory_manager.h"

namespace gpumux {

class CommPlan {
 public:
  // Where a step reads or writes: a slot of the plan and bytes into it.
  struct Operand {
    size_t slot = 0;
    uint64_t offset = 0;
  };
  // A device's part of a collective on the backend's engine.
  struct AcrossPart {
    DeviceIndex device;
    Operand send;
    Operand recv;
  };
  enum class SlotKind { kExisting, kResult, kTemporary };
  struct Slot {
    SlotKind kind = SlotKind::kExisting;
    DeviceIndex device;
    RangeUse range;  // for new memory, filled in by CommWork::Run
    std::optional<AllocationView> allocation;
  };
  struct Step {
    enum class Kind {
      kMeet,
      kCopy,
      kCopy2D,
      kReduce,
      kAverage,
      kToHost,
      // On the CollectiveEngine, every part on its device's stream.
      kAllReduceAcross,
      kBroadcastAcross,
      kReduceAcross,
    };
    Kind kind = Kind::kMeet;
    DeviceIndex on;  // whose stream runs it
    Operand dst;
    Operand src;
    uint64_t bytes = 0;  // kCopy, kToHost; the row's for kCopy2D
    uint64_t rows = 0;
    uint64_t dst_pitch = 0;
    uint64_t src_pitch = 0;
    ReduceOp op = ReduceOp::kSum;
    RngDtype dtype = RngDtype::kF32;
    uint64_t count = 0;
    int ranks = 0;
    void* host = nullptr;
    std::shared_ptr<void> keep_alive;
    std::vector<AcrossPart> across;  // the engine's steps: rank order
    size_t root = 0;                 // an index into `across`
  };
  // A result: a tensor as it is, or one in a new slot (whose id Run fills).
  struct Result {
    CommTensor tensor;
    std::optional<size_t> slot;
  };

  // A plan whose first device, whose stream times the collective and
  // records its completion event, is `root`.
  explicit CommPlan(DeviceIndex root) { AddDevice(root); }

  DeviceIndex root() const { return devices_.front(); }
  // Every device a slot or step names, each once: the root first, then in
  // the order they were named. A dropped step, AddResult and AddNewResult of
  // 0 bytes add none.
  const std::vector<DeviceIndex>& devices() const { return devices_; }
  // Mutable: Run fills in the new memory's ranges and allocations.
  std::vector<Slot>& slots() { return slots_; }
  const std::vector<Step>& steps() const { return steps_; }
  // Mutable: Run hands them back.
  std::vector<Result>& results() { return results_; }

  // Slots. Each returns the slot's index, for Operands.
  //
  // A tensor the caller named, of `bytes` on `device` (its byte size and
  // device checked by the caller). One without memory gets no slot's range
  // (no step uses it).
  size_t Existing(const CommTensor& tensor, DeviceIndex device, uint64_t bytes);
  // New memory of `bytes` (> 0) on `device` that becomes a result.
  size_t NewResult(DeviceIndex device, uint64_t bytes);
  // Scratch memory of `bytes` (> 0) on `device`, freed once everything is
  // queued: one slot per device, as large as its largest use (its steps all
  // run on that device's stream, in order, so they can share it).
  size_t Temporary(DeviceIndex device, uint64_t bytes);
  // Precondition: `slot` is one of this plan's.
  DeviceIndex DeviceOfSlot(size_t slot) const { return slots_[slot].device; }

  // Steps, in the order they run. A step with nothing to do (0 bytes, rows
  // or elements) is dropped. Every Operand must name one of this plan's
  // slots, at an offset that leaves room for the step's bytes.
  //
  // Every stream waits for the work queued on the others so far.
  void Meet();
  // `bytes` from src to dst on `on`'s stream.
  void Copy(DeviceIndex on, Operand dst, Operand src, uint64_t bytes);
  // `rows` runs of `row_bytes`, `src_pitch` apart in src, `dst_pitch` apart
  // in dst; a single Copy where the rows are contiguous on both sides (or
  // there is only one).
  void Copy2D(DeviceIndex on, Operand dst, uint64_t dst_pitch, Operand src, uint64_t src_pitch,
              uint64_t row_bytes, uint64_t rows);
  // dst = op(dst, src) over `count` elements of `dtype` on `on`'s stream.
  // Precondition: `src` is readable from `on` (CommWork::AddReduce sees to it).
  void Reduce(DeviceIndex on, ReduceOp op, RngDtype dtype, Operand dst, Operand src,
              uint64_t count);
  // An all_reduce's average: `data` (a sum of `ranks` inputs) divided by
  // `ranks`; dropped for a single rank, where the sum is the average.
  void Average(DeviceIndex on, RngDtype dtype, Operand data, uint64_t count, int ranks);
  // `bytes` from src to `host` on `on`'s stream; `keep_alive` holds the host
  // memory until the copy ran.
  void ToHost(DeviceIndex on, void* host, Operand src, uint64_t bytes,
              std::shared_ptr<void> keep_alive);
  // One collective on the backend's engine (`kind` one of the *Across):
  // `count` elements of `dtype` (bytes for a broadcast), parts in rank
  // order, `root` an index into them for a broadcast or reduce; it runs on
  // the root part's device. Precondition: root < parts.size().
  void Across(Step::Kind kind, std::vector<AcrossPart> parts, size_t root, ReduceOp op,
              RngDtype dtype, uint64_t count);

  // Results, in the order the call returns them.
  //
  // A result in memory the caller named; its tensor says `device`.
  void AddResult(CommTensor tensor, DeviceIndex device);
  // A result shaped like `like` in new memory of `bytes` on `device`, or
  // none for a tensor without elements (0 bytes); returns its slot
  // (nullopt then). Either way the result's tensor names `device`, id 0.
  std::optional<size_t> AddNewResult(const CommTensor& like, DeviceIndex device, uint64_t bytes);

 private:
  void AddDevice(DeviceIndex device);

  std::vector<DeviceIndex> devices_;  // the root first
  std::vector<Slot> slots_;
  std::vector<Step> steps_;
  std::vector<Result> results_;
};

}  // namespace gpumux
