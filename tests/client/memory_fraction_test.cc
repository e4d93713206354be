#include "client/memory_fraction.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;

TEST(PythonFloatReprTest, MatchesPythonRepr) {
  // Expected values are Python 3's repr(float(x)).
  EXPECT_EQ(PythonFloatRepr(1.5), "1.5");
  EXPECT_EQ(PythonFloatRepr(2.0), "2.0");
  EXPECT_EQ(PythonFloatRepr(-0.25), "-0.25");
  EXPECT_EQ(PythonFloatRepr(0.0), "0.0");
  EXPECT_EQ(PythonFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PythonFloatRepr(0.1), "0.1");
  EXPECT_EQ(PythonFloatRepr(1.1), "1.1");
  EXPECT_EQ(PythonFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PythonFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(PythonFloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(PythonFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(123456789.125), "123456789.125");
  EXPECT_EQ(PythonFloatRepr(1.2345678901234567e300), "1.2345678901234567e+300");
  EXPECT_EQ(PythonFloatRepr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(PythonFloatRepr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(PythonFloatRepr(std::nan("")), "nan");
}

TEST(ValidateMemoryFractionTest, AcceptsTheClosedUnitInterval) {
  EXPECT_OK(ValidateMemoryFraction(0.0));
  EXPECT_OK(ValidateMemoryFraction(0.5));
  EXPECT_OK(ValidateMemoryFraction(1.0));
}

TEST(ValidateMemoryFractionTest, RejectsWithPyTorchsMessage) {
  EXPECT_THAT(ValidateMemoryFraction(1.5),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: 1.5. Allowed range: 0~1"));
  EXPECT_THAT(ValidateMemoryFraction(-1.0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: -1.0. Allowed range: 0~1"));
  EXPECT_THAT(ValidateMemoryFraction(1.0000001),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: 1.0000001. Allowed range: 0~1"));
  EXPECT_THAT(ValidateMemoryFraction(std::nan("")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: nan. Allowed range: 0~1"));
}

}  // namespace
}  // namespace gpumux
