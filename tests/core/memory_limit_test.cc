// LimitInBytes: what a session's MemoryLimit comes to on a device, with
// PyTorch's arithmetic and refusal message for fractions.

#include "server/core/memory_limit.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kDeviceMemory = 16 * kMiB;

MemoryLimit Fraction(double fraction) {
  return {.kind = MemoryLimit::Kind::kFraction, .fraction = fraction};
}

TEST(MemoryLimitTest, AFractionIsThatShareOfTheDevicesMemory) {
  absl::StatusOr<uint64_t> bytes = LimitInBytes(Fraction(0.25), kDeviceMemory);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(*bytes, 4 * kMiB);
  bytes = LimitInBytes(Fraction(1), kDeviceMemory);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(*bytes, kDeviceMemory);
}

TEST(MemoryLimitTest, AFractionOfZeroAllowsNothingRatherThanEverything) {
  // 0 bytes would read as "no limit".
  absl::StatusOr<uint64_t> bytes = LimitInBytes(Fraction(0), kDeviceMemory);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(*bytes, 1u);
}

TEST(MemoryLimitTest, AFractionOutsideZeroToOneIsRefusedWithPyTorchsMessage) {
  EXPECT_THAT(LimitInBytes(Fraction(1.5), kDeviceMemory),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: 1.5. Allowed range: 0~1"));
  EXPECT_THAT(LimitInBytes(Fraction(-0.5), kDeviceMemory),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: -0.5. Allowed range: 0~1"));
  EXPECT_THAT(
      LimitInBytes(Fraction(std::numeric_limits<double>::quiet_NaN()), kDeviceMemory),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("Allowed range: 0~1")));
}

TEST(MemoryLimitTest, ByteLimitsAreTakenAsGivenButMustBePositive) {
  absl::StatusOr<uint64_t> bytes =
      LimitInBytes({.kind = MemoryLimit::Kind::kBytes, .bytes = 3 * kMiB + 1}, kDeviceMemory);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(*bytes, 3 * kMiB + 1);
  EXPECT_THAT(LimitInBytes({.kind = MemoryLimit::Kind::kBytes, .bytes = 0}, kDeviceMemory),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a byte limit must be positive; set unlimited to remove the limit"));
}

TEST(MemoryLimitTest, UnlimitedIsZeroBytes) {
  absl::StatusOr<uint64_t> bytes =
      LimitInBytes({.kind = MemoryLimit::Kind::kUnlimited, .bytes = kMiB}, kDeviceMemory);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(*bytes, 0u);
}

}  // namespace
}  // namespace gpumux
