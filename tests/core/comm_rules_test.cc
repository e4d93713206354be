// comm_rules on its own: tensors' byte sizes and devices, the request limits
// and device indices, with PyTorch's exact messages where PyTorch has one,
// and the helpers that print dtypes, lists and sizes as PyTorch does.
// CommTensorDevice runs over the core's books on a HostBackend of two
// devices (core_fixture.h).

#include "server/core/comm_rules.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/request_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/core_fixture.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::IsOkAndHolds;
using ::gpumux::testing::StatusIs;
using ::testing::Eq;

CommTensor Tensor(RngDtype dtype, Shape shape) {
  return CommTensor{AllocationId(0), 0, dtype, std::move(shape), DeviceIndex(0)};
}

TEST(CommRulesTest, ByteSizeIsElementsTimesTheDtypesSize) {
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kF64, {2, 3})), IsOkAndHolds(48u));
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kU8, {5})), IsOkAndHolds(5u));
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kBF16, {3, 1, 2})), IsOkAndHolds(12u));
  // A 0-d tensor holds one element.
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kF32, {})), IsOkAndHolds(4u));
}

TEST(CommRulesTest, NegativeDimensionHasPyTorchsMessage) {
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kF32, {2, -1, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Trying to create tensor with negative dimension -1: [2, -1, 3]")));
}

TEST(CommRulesTest, NegativeDimensionIsNamedBeforeTheSizeOverflows) {
  const int64_t huge = int64_t{1} << 62;
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kF32, {huge, huge, -2})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("Trying to create tensor with negative dimension -2: [",
                                       huge, ", ", huge, ", -2]"))));
}

TEST(CommRulesTest, MoreThanTheMaxDimensionsAreRefused) {
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kU8, Shape(kMaxTensorDims, 1))), IsOkAndHolds(1u));
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kU8, Shape(kMaxTensorDims + 1, 1))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("a tensor has at most ", kMaxTensorDims, " dimensions, not ",
                                       kMaxTensorDims + 1))));
}

TEST(CommRulesTest, ExactlyTwoToThe62BytesIsTheLargestTensor) {
  const int64_t elements = int64_t{1} << 60;  // of 4 bytes
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kF32, {elements})), IsOkAndHolds(uint64_t{1} << 62));
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kF32, {elements + 1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("a tensor of shape [", elements + 1,
                                       "] has more than 2^62 bytes"))));
}

TEST(CommRulesTest, ElementCountsPast64BitsAreRefusedNotWrapped) {
  // 2^93 elements, which wrap to 0 in 64 bits unchecked.
  const int64_t big = int64_t{1} << 31;
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kU8, {big, big, big})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("a tensor of shape [", big, ", ", big, ", ", big,
                                       "] has more than 2^62 bytes"))));
}

TEST(CommRulesTest, AZeroDimensionMakesAnyShapeEmpty) {
  const int64_t huge = int64_t{1} << 62;
  EXPECT_THAT(CommTensorBytes(Tensor(RngDtype::kF64, {huge, huge, 0})), IsOkAndHolds(0u));
}

TEST(CommRulesTest, TensorCountAllowsTheMaxAndNoMore) {
  EXPECT_THAT(CheckTensorCount(kMaxCommTensorsPerRequest), IsOk());
  EXPECT_THAT(CheckTensorCount(kMaxCommTensorsPerRequest + 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("a collective names at most ", kMaxCommTensorsPerRequest,
                                       " tensors, not ", kMaxCommTensorsPerRequest + 1))));
}

TEST(CommRulesTest, DeviceCountAllowsTheMaxAndNoMore) {
  EXPECT_THAT(CheckDeviceCount(kMaxCommDevicesPerRequest), IsOk());
  EXPECT_THAT(CheckDeviceCount(kMaxCommDevicesPerRequest + 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("a collective names at most ", kMaxCommDevicesPerRequest,
                                       " devices, not ", kMaxCommDevicesPerRequest + 1))));
}

TEST(CommRulesTest, NegativeDeviceHasPyTorchsMessage) {
  EXPECT_THAT(CheckNonNegative(0), IsOk());
  EXPECT_THAT(CheckNonNegative(-1), StatusIs(absl::StatusCode::kInvalidArgument,
                                             Eq("Expected non-negative device index, but got -1")));
  EXPECT_THAT(CheckedDevice(-3, 2), StatusIs(absl::StatusCode::kInvalidArgument,
                                             Eq("Expected non-negative device index, but got -3")));
}

TEST(CommRulesTest, DeviceOutOfRangeOfOneDevice) {
  EXPECT_THAT(CheckedDevice(1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("device 1 is out of range: this daemon has 1 device (0)")));
}

TEST(CommRulesTest, DeviceOutOfRangeOfSeveralDevices) {
  EXPECT_THAT(CheckedDevice(2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("device 2 is out of range: this daemon has 2 devices (0..1)")));
}

TEST(CommRulesTest, DevicePastInt32IsNamedAsGiven) {
  // Cast to int32 first, 2^32 would read as device 0.
  EXPECT_THAT(CheckedDevice(int64_t{1} << 32, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("device 4294967296 is out of range: this daemon has 2 devices (0..1)")));
}

TEST(CommRulesTest, DeviceInRangeIsItsIndex) {
  EXPECT_THAT(CheckedDevice(0, 1), IsOkAndHolds(DeviceIndex(0)));
  EXPECT_THAT(CheckedDevice(1, 2), IsOkAndHolds(DeviceIndex(1)));
}

TEST(CommRulesTest, ZeroDimensionalTensorGetsTheCallersMessage) {
  EXPECT_THAT(CheckHasDims({}, "chunk expects at least a 1-dimensional tensor"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("chunk expects at least a 1-dimensional tensor")));
  EXPECT_THAT(CheckHasDims({0}, "unused"), IsOk());
}

TEST(CommRulesTest, DtypesPrintAsTorchNamesThem) {
  EXPECT_STREQ(TorchDtypeName(RngDtype::kF32), "torch.float32");
  EXPECT_STREQ(TorchDtypeName(RngDtype::kF64), "torch.float64");
  EXPECT_STREQ(TorchDtypeName(RngDtype::kF16), "torch.float16");
  EXPECT_STREQ(TorchDtypeName(RngDtype::kBF16), "torch.bfloat16");
  EXPECT_STREQ(TorchDtypeName(RngDtype::kI32), "torch.int32");
  EXPECT_STREQ(TorchDtypeName(RngDtype::kI64), "torch.int64");
  EXPECT_STREQ(TorchDtypeName(RngDtype::kU8), "torch.uint8");
}

TEST(CommRulesTest, OptionalListsPrintAsPythonPrintsThem) {
  EXPECT_EQ(PythonList(std::nullopt), "None");
  EXPECT_EQ(PythonList(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(PythonList(std::vector<int64_t>{0, -1, 2}), "[0, -1, 2]");
}

TEST(CommRulesTest, SizesJoinAsReduceAddJoinsThem) {
  EXPECT_EQ(JoinedSizes({2, 3}), "2x3");
  EXPECT_EQ(JoinedSizes({7}), "7");
  EXPECT_EQ(JoinedSizes({}), "");
}

class CommTensorDeviceTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    session_ = Open("comm rules");
  }

  SessionId session_;
};

TEST_F(CommTensorDeviceTest, TensorWithMemoryIsOnItsAllocationsDevice) {
  const AllocationId id = Allocate(session_, DeviceIndex(1), 1024);
  // Device 0, the proto's default, reads as unset.
  const CommTensor tensor{id, 0, RngDtype::kF32, {4}, DeviceIndex(0)};
  EXPECT_THAT(CommTensorDevice(*memory_, session_, tensor), IsOkAndHolds(DeviceIndex(1)));
}

TEST_F(CommTensorDeviceTest, NamingAnotherDeviceThanItsMemorysIsRefused) {
  const AllocationId id = Allocate(session_, DeviceIndex(0), 1024);
  const CommTensor tensor{id, 0, RngDtype::kF32, {4}, DeviceIndex(1)};
  EXPECT_THAT(CommTensorDevice(*memory_, session_, tensor),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("a tensor of allocation ", id.value(),
                                       " is on its memory's device 0, not on the device 1 it "
                                       "names"))));
}

TEST_F(CommTensorDeviceTest, TensorWithoutElementsOrMemoryIsOnTheDeviceItNames) {
  EXPECT_THAT(
      CommTensorDevice(*memory_, session_,
                       CommTensor{AllocationId(0), 0, RngDtype::kF32, {0, 3}, DeviceIndex(1)}),
      IsOkAndHolds(DeviceIndex(1)));
  EXPECT_THAT(CommTensorDevice(*memory_, session_,
                               CommTensor{AllocationId(0), 0, RngDtype::kF32, {0}, DeviceIndex(2)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("device 2 is out of range: this daemon has 2 devices (0..1)")));
}

TEST_F(CommTensorDeviceTest, MemoryOfAnotherSessionIsNotFound) {
  const SessionId other = Open("other");
  const AllocationId id = Allocate(other, DeviceIndex(0), 1024);
  const CommTensor tensor{id, 0, RngDtype::kF32, {4}, DeviceIndex(0)};
  EXPECT_THAT(CommTensorDevice(*memory_, session_, tensor), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(CommTensorDevice(*memory_, other, tensor), IsOkAndHolds(DeviceIndex(0)));
}

TEST_F(CommTensorDeviceTest, TensorPastItsAllocationIsOutOfRange) {
  const AllocationId id = Allocate(session_, DeviceIndex(0), 1024);
  EXPECT_THAT(CommTensorDevice(*memory_, session_,
                               CommTensor{id, 256, RngDtype::kF32, {192}, DeviceIndex(0)}),
              IsOkAndHolds(DeviceIndex(0)));  // exactly fits
  EXPECT_THAT(CommTensorDevice(*memory_, session_,
                               CommTensor{id, 256, RngDtype::kF32, {193}, DeviceIndex(0)}),
              StatusIs(absl::StatusCode::kOutOfRange,
                       Eq(absl::StrCat("a tensor of shape [193] (772 bytes) at offset 256 does "
                                       "not fit allocation ",
                                       id.value(), " of 1024 bytes"))));
  // An offset past the end, even without elements.
  EXPECT_THAT(CommTensorDevice(*memory_, session_,
                               CommTensor{id, 1025, RngDtype::kF32, {0}, DeviceIndex(0)}),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST_F(CommTensorDeviceTest, ByteSizeIsCheckedBeforeTheMemory) {
  const CommTensor tensor{AllocationId(999), 0, RngDtype::kF32, {-1}, DeviceIndex(0)};
  EXPECT_THAT(CommTensorDevice(*memory_, session_, tensor),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Trying to create tensor with negative dimension -1: [-1]")));
}

}  // namespace
}  // namespace gpumux
