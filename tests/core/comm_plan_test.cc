// CommPlan on its own: which slots and steps each call adds, which it drops
// for having nothing to do, which devices take part, and the results.

#include "server/core/comm_plan.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gpumux {
namespace {

using Kind = CommPlan::Step::Kind;
using Operand = CommPlan::Operand;
using SlotKind = CommPlan::SlotKind;

const DeviceIndex kD0(0);
const DeviceIndex kD1(1);
const DeviceIndex kD2(2);

CommTensor Tensor(uint64_t id, uint64_t offset, Shape shape) {
  return CommTensor{AllocationId(id), offset, RngDtype::kF32, std::move(shape), DeviceIndex(0)};
}

std::vector<int32_t> Devices(const CommPlan& plan) {
  std::vector<int32_t> devices;
  for (DeviceIndex device : plan.devices()) devices.push_back(device.value());
  return devices;
}

TEST(CommPlanTest, ContiguousRowsCopyAsOne) {
  CommPlan plan(kD0);
  const size_t src = plan.Existing(Tensor(7, 0, {4, 16}), kD0, 256);
  const size_t dst = plan.NewResult(kD1, 256);
  plan.Copy2D(kD1, Operand{dst}, 64, Operand{src, 8}, 64, 64, 4);
  ASSERT_EQ(plan.steps().size(), 1u);
  const CommPlan::Step& step = plan.steps()[0];
  EXPECT_EQ(step.kind, Kind::kCopy);
  EXPECT_EQ(step.on, kD1);
  EXPECT_EQ(step.dst.slot, dst);
  EXPECT_EQ(step.src.slot, src);
  EXPECT_EQ(step.src.offset, 8u);
  EXPECT_EQ(step.bytes, 256u);
}

TEST(CommPlanTest, OneRowCopiesAsOneWhateverThePitches) {
  CommPlan plan(kD0);
  const size_t src = plan.Existing(Tensor(7, 0, {4, 16}), kD0, 256);
  const size_t dst = plan.NewResult(kD0, 32);
  plan.Copy2D(kD0, Operand{dst}, 32, Operand{src}, 64, 32, 1);
  ASSERT_EQ(plan.steps().size(), 1u);
  EXPECT_EQ(plan.steps()[0].kind, Kind::kCopy);
  EXPECT_EQ(plan.steps()[0].bytes, 32u);
}

TEST(CommPlanTest, StridedRowsStayOneCopy2D) {
  CommPlan plan(kD0);
  const size_t src = plan.Existing(Tensor(7, 0, {4, 16}), kD0, 256);
  const size_t dst = plan.NewResult(kD1, 128);
  plan.Copy2D(kD1, Operand{dst}, 32, Operand{src, 32}, 64, 32, 4);
  ASSERT_EQ(plan.steps().size(), 1u);
  const CommPlan::Step& step = plan.steps()[0];
  EXPECT_EQ(step.kind, Kind::kCopy2D);
  EXPECT_EQ(step.on, kD1);
  EXPECT_EQ(step.dst.slot, dst);
  EXPECT_EQ(step.src.offset, 32u);
  EXPECT_EQ(step.bytes, 32u);  // a row's
  EXPECT_EQ(step.rows, 4u);
  EXPECT_EQ(step.dst_pitch, 32u);
  EXPECT_EQ(step.src_pitch, 64u);
}

TEST(CommPlanTest, StepsWithNothingToDoAreDroppedAndAddNoDevice) {
  CommPlan plan(kD0);
  const size_t a = plan.Existing(Tensor(1, 0, {0}), kD0, 0);
  const Operand op{a};
  plan.Copy(kD1, op, op, 0);
  plan.Copy2D(kD1, op, 64, op, 128, 0, 4);
  plan.Copy2D(kD1, op, 64, op, 128, 64, 0);
  plan.Reduce(kD1, ReduceOp::kSum, RngDtype::kF32, op, op, 0);
  plan.Average(kD1, RngDtype::kF32, op, 0, 2);
  plan.ToHost(kD1, nullptr, op, 0, nullptr);
  plan.Across(Kind::kAllReduceAcross, {{kD1, op, op}, {kD2, op, op}}, 0, ReduceOp::kSum,
              RngDtype::kF32, 0);
  EXPECT_TRUE(plan.steps().empty());
  EXPECT_EQ(Devices(plan), std::vector<int32_t>{0});
}

TEST(CommPlanTest, AverageOfOneRankIsDropped) {
  CommPlan plan(kD0);
  const size_t a = plan.Existing(Tensor(1, 0, {4}), kD0, 16);
  plan.Average(kD0, RngDtype::kF32, Operand{a}, 4, 1);
  EXPECT_TRUE(plan.steps().empty());
  plan.Average(kD0, RngDtype::kF32, Operand{a}, 4, 3);
  ASSERT_EQ(plan.steps().size(), 1u);
  EXPECT_EQ(plan.steps()[0].kind, Kind::kAverage);
  EXPECT_EQ(plan.steps()[0].ranks, 3);
  EXPECT_EQ(plan.steps()[0].count, 4u);
}

TEST(CommPlanTest, MeetIsAlwaysAStep) {
  CommPlan plan(kD0);
  plan.Meet();
  ASSERT_EQ(plan.steps().size(), 1u);
  EXPECT_EQ(plan.steps()[0].kind, Kind::kMeet);
}

TEST(CommPlanTest, TemporaryReusesOneSlotPerDeviceGrowingToItsLargestUse) {
  CommPlan plan(kD0);
  const size_t first = plan.Temporary(kD1, 100);
  EXPECT_EQ(plan.Temporary(kD1, 300), first);
  EXPECT_EQ(plan.Temporary(kD1, 200), first);
  const size_t other = plan.Temporary(kD0, 50);
  EXPECT_NE(other, first);
  ASSERT_EQ(plan.slots().size(), 2u);
  EXPECT_EQ(plan.slots()[first].kind, SlotKind::kTemporary);
  EXPECT_EQ(plan.slots()[first].device, kD1);
  EXPECT_EQ(plan.slots()[first].range.size, 300u);
  EXPECT_EQ(plan.slots()[other].device, kD0);
  EXPECT_EQ(plan.slots()[other].range.size, 50u);
}

TEST(CommPlanTest, TemporaryNeverSharesAResultOrTheCallersMemory) {
  CommPlan plan(kD0);
  const size_t existing = plan.Existing(Tensor(3, 0, {4}), kD0, 16);
  const size_t result = plan.NewResult(kD0, 16);
  const size_t temporary = plan.Temporary(kD0, 16);
  EXPECT_NE(temporary, existing);
  EXPECT_NE(temporary, result);
  EXPECT_EQ(plan.slots()[existing].range.size, 16u);
  EXPECT_EQ(plan.slots()[result].range.size, 16u);
}

TEST(CommPlanTest, DevicesKeepTheRootFirstAndNoneTwice) {
  CommPlan plan(kD1);
  const size_t a = plan.Existing(Tensor(1, 0, {4}), kD0, 16);
  plan.NewResult(kD1, 16);
  plan.Copy(kD2, Operand{a}, Operand{a}, 16);
  plan.Existing(Tensor(2, 0, {4}), kD0, 16);
  plan.Temporary(kD2, 16);
  EXPECT_EQ(plan.root(), kD1);
  EXPECT_EQ(Devices(plan), (std::vector<int32_t>{1, 0, 2}));
}

TEST(CommPlanTest, AcrossRunsOnTheRootPartsDeviceAndAddsEveryPart) {
  CommPlan plan(kD0);
  const size_t a = plan.Existing(Tensor(1, 0, {4}), kD0, 16);
  const size_t b = plan.Existing(Tensor(2, 0, {4}), kD1, 16);
  const size_t c = plan.NewResult(kD2, 16);
  plan.Across(Kind::kReduceAcross, {{kD0, {a}, {a}}, {kD1, {b}, {b}}, {kD2, {c}, {c}}}, 2,
              ReduceOp::kMax, RngDtype::kF32, 4);
  ASSERT_EQ(plan.steps().size(), 1u);
  const CommPlan::Step& step = plan.steps()[0];
  EXPECT_EQ(step.kind, Kind::kReduceAcross);
  EXPECT_EQ(step.on, kD2);
  EXPECT_EQ(step.root, 2u);
  EXPECT_EQ(step.op, ReduceOp::kMax);
  EXPECT_EQ(step.count, 4u);
  ASSERT_EQ(step.across.size(), 3u);
  EXPECT_EQ(step.across[1].send.slot, b);
  EXPECT_EQ(Devices(plan), (std::vector<int32_t>{0, 1, 2}));
}

TEST(CommPlanTest, ExistingSlotIsTheCallersRange) {
  CommPlan plan(kD0);
  const size_t slot = plan.Existing(Tensor(7, 64, {32}), kD1, 128);
  const CommPlan::Slot& s = plan.slots()[slot];
  EXPECT_EQ(s.kind, SlotKind::kExisting);
  EXPECT_EQ(s.device, kD1);
  EXPECT_EQ(s.range.id, AllocationId(7));
  EXPECT_EQ(s.range.offset, 64u);
  EXPECT_EQ(s.range.size, 128u);
  EXPECT_EQ(plan.DeviceOfSlot(slot), kD1);
}

TEST(CommPlanTest, AddNewResultOfZeroBytesGetsNoSlot) {
  CommPlan plan(kD0);
  EXPECT_EQ(plan.AddNewResult(Tensor(5, 8, {0, 3}), kD1, 0), std::nullopt);
  EXPECT_TRUE(plan.slots().empty());
  EXPECT_EQ(Devices(plan), std::vector<int32_t>{0});
  ASSERT_EQ(plan.results().size(), 1u);
  const CommPlan::Result& result = plan.results()[0];
  EXPECT_EQ(result.slot, std::nullopt);
  EXPECT_EQ(result.tensor.id, AllocationId(0));
  EXPECT_EQ(result.tensor.offset, 0u);
  EXPECT_EQ(result.tensor.shape, (Shape{0, 3}));
  EXPECT_EQ(result.tensor.device, kD1);
}

TEST(CommPlanTest, AddNewResultTakesAResultSlotOnItsDevice) {
  CommPlan plan(kD0);
  CommTensor like = Tensor(5, 8, {2, 3});
  like.dtype = RngDtype::kF64;
  const std::optional<size_t> slot = plan.AddNewResult(like, kD1, 48);
  ASSERT_TRUE(slot.has_value());
  const CommPlan::Slot& s = plan.slots()[*slot];
  EXPECT_EQ(s.kind, SlotKind::kResult);
  EXPECT_EQ(s.device, kD1);
  EXPECT_EQ(s.range.id, AllocationId(0));  // Run fills it in
  EXPECT_EQ(s.range.size, 48u);
  EXPECT_EQ(Devices(plan), (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(plan.results().size(), 1u);
  const CommPlan::Result& result = plan.results()[0];
  EXPECT_EQ(result.slot, slot);
  EXPECT_EQ(result.tensor.id, AllocationId(0));
  EXPECT_EQ(result.tensor.offset, 0u);
  EXPECT_EQ(result.tensor.dtype, RngDtype::kF64);
  EXPECT_EQ(result.tensor.shape, (Shape{2, 3}));
  EXPECT_EQ(result.tensor.device, kD1);
}

TEST(CommPlanTest, AddResultKeepsTheTensorAndNamesItsDevice) {
  CommPlan plan(kD0);
  plan.AddResult(Tensor(9, 16, {4}), kD1);
  ASSERT_EQ(plan.results().size(), 1u);
  const CommPlan::Result& result = plan.results()[0];
  EXPECT_EQ(result.slot, std::nullopt);
  EXPECT_EQ(result.tensor.id, AllocationId(9));
  EXPECT_EQ(result.tensor.offset, 16u);
  EXPECT_EQ(result.tensor.device, kD1);
  EXPECT_TRUE(plan.slots().empty());
}

}  // namespace
}  // namespace gpumux
