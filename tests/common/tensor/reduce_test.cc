// The collectives' host reductions: every op on every dtype against a plain
// computation over random data (never zeros), PyTorch's step rules (f16 and
// bf16 rounded after every step, integers wrapping, NaN through min and
// max), averages, and unaligned memory.

#include "common/tensor/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/tensor/philox.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kAvg};

template <typename T>
std::vector<unsigned char> Bytes(const std::vector<T>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}
template <typename T>
std::vector<T> Values(const std::vector<unsigned char>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// Reduces `inputs` (one per rank) with Accumulate, in rank order, then
// FinishAverage for kAvg, as an engine does.
std::vector<unsigned char> Reduce(ReduceOp op, RngDtype dtype,
                                  const std::vector<std::vector<unsigned char>>& inputs) {
  std::vector<unsigned char> out = inputs[0];
  const uint64_t count = out.size() / RngElementSize(dtype);
  for (size_t r = 1; r < inputs.size(); ++r)
    Accumulate(op, dtype, out.data(), inputs[r].data(), count);
  if (op == ReduceOp::kAvg)
    FinishAverage(dtype, out.data(), count, static_cast<int>(inputs.size()));
  return out;
}

// The plain computation for a floating dtype whose values `load` and `store`
// convert: each step in `Compute`, rounded by store.
template <typename Compute, typename Load, typename Store>
Compute Expected(ReduceOp op, const std::vector<Compute>& column, Load load, Store store) {
  Compute acc = column[0];
  for (size_t r = 1; r < column.size(); ++r) {
    const Compute x = column[r];
    Compute next = acc;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        next = acc + x;
        break;
      case ReduceOp::kProduct:
        next = acc * x;
        break;
      case ReduceOp::kMin:
        next = std::isnan(acc) || std::isnan(x) ? std::numeric_limits<Compute>::quiet_NaN()
                                                : std::fmin(acc, x);
        break;
      case ReduceOp::kMax:
        next = std::isnan(acc) || std::isnan(x) ? std::numeric_limits<Compute>::quiet_NaN()
                                                : std::fmax(acc, x);
        break;
    }
    acc = load(store(next));
  }
  if (op == ReduceOp::kAvg) acc = load(store(acc / static_cast<Compute>(column.size())));
  return acc;
}

class ReduceTest : public ::testing::TestWithParam<int> {
 protected:
  int ranks() const { return GetParam(); }
  std::mt19937_64 random_{20261203};
};

TEST_P(ReduceTest, FloatingDtypesMatchAPlainComputation) {
  const uint64_t count = 1000;
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  auto nonzero = [&] {
    float v = value(random_);
    return v == 0.0f ? 0.5f : v;
  };
  for (ReduceOp op : kOps) {
    SCOPED_TRACE(ReduceOpName(op));
    // f32 and f64.
    {
      std::vector<std::vector<float>> f32(ranks(), std::vector<float>(count));
      std::vector<std::vector<double>> f64(ranks(), std::vector<double>(count));
      std::vector<std::vector<unsigned char>> in32, in64;
      for (int r = 0; r < ranks(); ++r) {
        for (uint64_t i = 0; i < count; ++i) f64[r][i] = f32[r][i] = nonzero();
        in32.push_back(Bytes(f32[r]));
        in64.push_back(Bytes(f64[r]));
      }
      const std::vector<float> got32 = Values<float>(Reduce(op, RngDtype::kF32, in32));
      const std::vector<double> got64 = Values<double>(Reduce(op, RngDtype::kF64, in64));
      for (uint64_t i = 0; i < count; ++i) {
        std::vector<float> column32;
        std::vector<double> column64;
        for (int r = 0; r < ranks(); ++r) {
          column32.push_back(f32[r][i]);
          column64.push_back(f64[r][i]);
        }
        auto same32 = [](float f) { return f; };
        auto same64 = [](double d) { return d; };
        ASSERT_EQ(got32[i], Expected(op, column32, same32, same32)) << i;
        ASSERT_EQ(got64[i], Expected(op, column64, same64, same64)) << i;
      }
    }
    // f16 and bf16: values stored as bits, every step rounded.
    for (RngDtype dtype : {RngDtype::kF16, RngDtype::kBF16}) {
      const bool half = dtype == RngDtype::kF16;
      auto store = [half](float f) { return half ? FloatToHalfBits(f) : FloatToBFloat16Bits(f); };
      auto load = [half](uint16_t b) { return half ? HalfBitsToFloat(b) : BFloat16BitsToFloat(b); };
      std::vector<std::vector<uint16_t>> bits(ranks(), std::vector<uint16_t>(count));
      std::vector<std::vector<unsigned char>> in;
      for (int r = 0; r < ranks(); ++r) {
        for (uint64_t i = 0; i < count; ++i) bits[r][i] = store(nonzero());
        in.push_back(Bytes(bits[r]));
      }
      const std::vector<uint16_t> got = Values<uint16_t>(Reduce(op, dtype, in));
      for (uint64_t i = 0; i < count; ++i) {
        std::vector<float> column;
        for (int r = 0; r < ranks(); ++r) column.push_back(load(bits[r][i]));
        ASSERT_EQ(got[i], store(Expected(op, column, load, store))) << i;
      }
    }
  }
}

TEST_P(ReduceTest, IntegerDtypesMatchAPlainComputationAndWrap) {
  const uint64_t count = 1000;
  for (ReduceOp op : kOps) {
    SCOPED_TRACE(ReduceOpName(op));
    std::vector<std::vector<int32_t>> i32(ranks(), std::vector<int32_t>(count));
    std::vector<std::vector<int64_t>> i64(ranks(), std::vector<int64_t>(count));
    std::vector<std::vector<uint8_t>> u8(ranks(), std::vector<uint8_t>(count));
    std::vector<std::vector<unsigned char>> in32, in64, in8;
    for (int r = 0; r < ranks(); ++r) {
      for (uint64_t i = 0; i < count; ++i) {
        // Full-range values, so that sums and products wrap.
        i32[r][i] = static_cast<int32_t>(random_() | 1);
        i64[r][i] = static_cast<int64_t>(random_() | 1);
        u8[r][i] = static_cast<uint8_t>(random_() | 1);
      }
      in32.push_back(Bytes(i32[r]));
      in64.push_back(Bytes(i64[r]));
      in8.push_back(Bytes(u8[r]));
    }
    const std::vector<int32_t> got32 = Values<int32_t>(Reduce(op, RngDtype::kI32, in32));
    const std::vector<int64_t> got64 = Values<int64_t>(Reduce(op, RngDtype::kI64, in64));
    const std::vector<uint8_t> got8 = Values<uint8_t>(Reduce(op, RngDtype::kU8, in8));
    for (uint64_t i = 0; i < count; ++i) {
      // Unsigned arithmetic of the same width is two's-complement wrap.
      uint32_t a32 = static_cast<uint32_t>(i32[0][i]);
      uint64_t a64 = static_cast<uint64_t>(i64[0][i]);
      uint32_t a8 = u8[0][i];
      int32_t m32 = i32[0][i];
      int64_t m64 = i64[0][i];
      for (int r = 1; r < ranks(); ++r) {
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
            a32 += static_cast<uint32_t>(i32[r][i]);
            a64 += static_cast<uint64_t>(i64[r][i]);
            a8 = (a8 + u8[r][i]) & 0xff;
            break;
          case ReduceOp::kProduct:
            a32 *= static_cast<uint32_t>(i32[r][i]);
            a64 *= static_cast<uint64_t>(i64[r][i]);
            a8 = (a8 * u8[r][i]) & 0xff;
            break;
          case ReduceOp::kMin:
            m32 = std::min(m32, i32[r][i]);
            m64 = std::min(m64, i64[r][i]);
            a8 = std::min<uint32_t>(a8, u8[r][i]);
            break;
          case ReduceOp::kMax:
            m32 = std::max(m32, i32[r][i]);
            m64 = std::max(m64, i64[r][i]);
            a8 = std::max<uint32_t>(a8, u8[r][i]);
            break;
        }
      }
      const bool minmax = op == ReduceOp::kMin || op == ReduceOp::kMax;
      int32_t e32 = minmax ? m32 : static_cast<int32_t>(a32);
      int64_t e64 = minmax ? m64 : static_cast<int64_t>(a64);
      uint8_t e8 = static_cast<uint8_t>(a8);
      if (op == ReduceOp::kAvg) {
        e32 /= ranks();
        e64 /= ranks();
        e8 = static_cast<uint8_t>(e8 / ranks());
      }
      ASSERT_EQ(got32[i], e32) << i;
      ASSERT_EQ(got64[i], e64) << i;
      ASSERT_EQ(got8[i], e8) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReduceTest, ::testing::Values(1, 2, 3, 8));

TEST(ReduceRulesTest, HalfSumsRoundAfterEveryStepAsTorchAddDoes) {
  // 2048 + 1 + 1 in f16: each step rounds 2049 back to 2048 (spacing 2 there);
  // a sum in f32 rounded once would give 2050.
  const uint16_t big = FloatToHalfBits(2048.0f);
  const uint16_t one = FloatToHalfBits(1.0f);
  uint16_t acc = big;
  for (int step = 0; step < 2; ++step) Accumulate(ReduceOp::kSum, RngDtype::kF16, &acc, &one, 1);
  EXPECT_EQ(HalfBitsToFloat(acc), 2048.0f);
  // bf16: 256 + 1 + 1 stays 256 (spacing 2).
  uint16_t bacc = FloatToBFloat16Bits(256.0f);
  const uint16_t bone = FloatToBFloat16Bits(1.0f);
  for (int step = 0; step < 2; ++step) Accumulate(ReduceOp::kSum, RngDtype::kBF16, &bacc, &bone, 1);
  EXPECT_EQ(BFloat16BitsToFloat(bacc), 256.0f);
  // Overflow to infinity is the dtype's: 60000 + 60000 in f16.
  uint16_t large = FloatToHalfBits(60000.0f);
  Accumulate(ReduceOp::kSum, RngDtype::kF16, &large, &large, 1);
  EXPECT_TRUE(std::isinf(HalfBitsToFloat(large)));
}

TEST(ReduceRulesTest, IntegersWrapAndAveragesTruncateTowardZero) {
  int32_t max32 = std::numeric_limits<int32_t>::max();
  const int32_t one32 = 1;
  Accumulate(ReduceOp::kSum, RngDtype::kI32, &max32, &one32, 1);
  EXPECT_EQ(max32, std::numeric_limits<int32_t>::min());
  uint8_t u = 200;
  const uint8_t v = 100;
  Accumulate(ReduceOp::kSum, RngDtype::kU8, &u, &v, 1);
  EXPECT_EQ(u, 44);
  int64_t big = int64_t{1} << 62;
  const int64_t four = 4;
  Accumulate(ReduceOp::kProduct, RngDtype::kI64, &big, &four, 1);
  EXPECT_EQ(big, 0);
  int32_t negative = -7;
  FinishAverage(RngDtype::kI32, &negative, 1, 2);
  EXPECT_EQ(negative, -3);
  uint8_t many = 250;
  FinishAverage(RngDtype::kU8, &many, 1, 1000);  // more ranks than uint8 holds
  EXPECT_EQ(many, 0);
  float f = 1.0f;
  FinishAverage(RngDtype::kF32, &f, 1, 3);
  EXPECT_EQ(f, 1.0f / 3.0f);
}

TEST(ReduceRulesTest, MinAndMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    float a[2] = {1.0f, nan};
    const float b[2] = {nan, 2.0f};
    Accumulate(op, RngDtype::kF32, a, b, 2);
    EXPECT_TRUE(std::isnan(a[0]) && std::isnan(a[1])) << ReduceOpName(op);
    uint16_t h[2] = {FloatToHalfBits(1.0f), FloatToHalfBits(nan)};
    const uint16_t g[2] = {FloatToHalfBits(nan), FloatToHalfBits(-2.0f)};
    Accumulate(op, RngDtype::kF16, h, g, 2);
    EXPECT_TRUE(std::isnan(HalfBitsToFloat(h[0])) && std::isnan(HalfBitsToFloat(h[1])));
  }
}

TEST(ReduceRulesTest, UnalignedMemoryAndZeroCounts) {
  // Doubles at an odd address, in and out.
  std::vector<unsigned char> dst(1 + 3 * sizeof(double)), src(1 + 3 * sizeof(double));
  const double a[3] = {1.5, -2.0, 4.0}, b[3] = {0.25, 8.0, -1.0};
  std::memcpy(dst.data() + 1, a, sizeof(a));
  std::memcpy(src.data() + 1, b, sizeof(b));
  Accumulate(ReduceOp::kSum, RngDtype::kF64, dst.data() + 1, src.data() + 1, 3);
  double out[3];
  std::memcpy(out, dst.data() + 1, sizeof(out));
  EXPECT_EQ(out[0], 1.75);
  EXPECT_EQ(out[1], 6.0);
  EXPECT_EQ(out[2], 3.0);
  Accumulate(ReduceOp::kProduct, RngDtype::kF64, nullptr, nullptr, 0);
  FinishAverage(RngDtype::kF64, nullptr, 0, 4);
  EXPECT_STREQ(ReduceOpName(ReduceOp::kProduct), "prod");
  EXPECT_STREQ(ReduceOpName(ReduceOp::kAvg), "avg");
}

}  // namespace
}  // namespace gpumux
