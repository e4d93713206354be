#include "common/tensor/rng_fill.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/tensor/philox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<unsigned char> Fill(const RngRequest& request, uint64_t seed, uint64_t offset) {
  EXPECT_OK(ValidateRngRequest(request));
  std::vector<unsigned char> bytes(request.elements * RngElementSize(request.dtype));
  FillRandom(bytes.data(), request, seed, offset);
  return bytes;
}

template <typename T>
std::vector<T> As(const std::vector<unsigned char>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// Values of a floating dtype, widened exactly to double.
std::vector<double> AsDoubles(RngDtype dtype, const std::vector<unsigned char>& bytes) {
  if (dtype == RngDtype::kF64) return As<double>(bytes);
  std::vector<double> out;
  if (dtype == RngDtype::kF32) {
    for (float f : As<float>(bytes)) out.push_back(f);
    return out;
  }
  for (uint16_t h : As<uint16_t>(bytes)) {
    out.push_back(dtype == RngDtype::kF16 ? HalfBitsToFloat(h) : BFloat16BitsToFloat(h));
  }
  return out;
}

// Every valid (dtype, kind) with typical parameters.
std::vector<RngRequest> AllRequestShapes(uint64_t elements) {
  std::vector<RngRequest> shapes;
  for (RngDtype dtype : {RngDtype::kF32, RngDtype::kF64, RngDtype::kF16, RngDtype::kBF16}) {
    shapes.push_back({dtype, RngKind::kUniform, elements, -2.0, 3.0});
    shapes.push_back({dtype, RngKind::kNormal, elements, 3.0, 2.0});
  }
  shapes.push_back({RngDtype::kI32, RngKind::kUniform, elements, -5, 7});
  shapes.push_back({RngDtype::kI64, RngKind::kUniform, elements, -1e12, 1e12 + 3});
  shapes.push_back({RngDtype::kU8, RngKind::kUniform, elements, 3, 200});
  for (RngDtype dtype : {RngDtype::kF32, RngDtype::kF64, RngDtype::kF16, RngDtype::kBF16,
                         RngDtype::kI32, RngDtype::kI64, RngDtype::kU8}) {
    shapes.push_back({dtype, RngKind::kBits, elements, 0, 0});
  }
  return shapes;
}

std::string Describe(const RngRequest& r) {
  return "dtype " + std::to_string(static_cast<int>(r.dtype)) + " kind " +
         std::to_string(static_cast<int>(r.kind));
}

// The value FillRandom should write for element i, built from the header's
// per-element functions and single-word stream lookups (no block loop).
std::vector<unsigned char> Reference(const RngRequest& r, uint64_t seed, uint64_t offset) {
  const size_t size = RngElementSize(r.dtype);
  const int w = RngWordsPerElement(r.dtype);
  std::vector<unsigned char> bytes(r.elements * size);
  auto word = [&](uint64_t element, int k) {
    return PhiloxStreamWord(seed, offset, element * w + k);
  };
  for (uint64_t i = 0; i < r.elements; ++i) {
    unsigned char* dst = &bytes[i * size];
    const uint32_t w0 = word(i, 0);
    const uint32_t w1 = w == 2 ? word(i, 1) : 0;
    uint64_t bits = 0;
    if (r.kind == RngKind::kBits) {
      bits = w0 | (static_cast<uint64_t>(w1) << 32);
    } else if (r.kind == RngKind::kUniform) {
      switch (r.dtype) {
        case RngDtype::kF32:
          bits = FloatToBits(UniformFloatFromWord(w0, float(r.a), float(r.b)));
          break;
        case RngDtype::kF64: {
          const double d = UniformDoubleFromWords(w0, w1, r.a, r.b);
          std::memcpy(&bits, &d, 8);
          break;
        }
        case RngDtype::kF16:
          bits = UniformHalfFromWord(w0, float(r.a), float(r.b));
          break;
        case RngDtype::kBF16:
          bits = UniformBFloat16FromWord(w0, float(r.a), float(r.b));
          break;
        case RngDtype::kI32:
          bits = static_cast<uint32_t>(UniformInt32FromWord(w0, int32_t(r.a), uint32_t(r.b - r.a)));
          break;
        case RngDtype::kI64:
          bits = static_cast<uint64_t>(
              UniformInt64FromWords(w0, w1, int64_t(r.a), uint64_t(r.b - r.a)));
          break;
        case RngDtype::kU8:
          bits = UniformUint8FromWord(w0, uint32_t(r.a), uint32_t(r.b - r.a));
          break;
      }
    } else {
      const uint64_t first = i & ~uint64_t{1};  // the pair (first, first + 1)
      const bool second = i & 1;
      if (r.dtype == RngDtype::kF64) {
        const DoublePair z = NormalDoublePairFromWords(
            word(first, 0), word(first, 1), word(first + 1, 0), word(first + 1, 1), r.a, r.b);
        const double d = second ? z.second : z.first;
        std::memcpy(&bits, &d, 8);
      } else {
        const FloatPair z =
            NormalFloatPairFromWords(word(first, 0), word(first + 1, 0), float(r.a), float(r.b));
        const float f = second ? z.second : z.first;
        bits = r.dtype == RngDtype::kF32   ? FloatToBits(f)
               : r.dtype == RngDtype::kF16 ? FloatToHalfBits(f)
                                           : FloatToBFloat16Bits(f);
      }
    }
    std::memcpy(dst, &bits, size);  // little-endian host
  }
  return bytes;
}

TEST(RngFillTest, SizesAndWords) {
  EXPECT_EQ(RngElementSize(RngDtype::kF32), 4u);
  EXPECT_EQ(RngElementSize(RngDtype::kF64), 8u);
  EXPECT_EQ(RngElementSize(RngDtype::kF16), 2u);
  EXPECT_EQ(RngElementSize(RngDtype::kBF16), 2u);
  EXPECT_EQ(RngElementSize(RngDtype::kI32), 4u);
  EXPECT_EQ(RngElementSize(RngDtype::kI64), 8u);
  EXPECT_EQ(RngElementSize(RngDtype::kU8), 1u);
  EXPECT_EQ(RngWordsPerElement(RngDtype::kF64), 2);
  EXPECT_EQ(RngWordsPerElement(RngDtype::kI64), 2);
  EXPECT_EQ(RngWordsPerElement(RngDtype::kF16), 1);
  EXPECT_EQ(RngWordsPerElement(RngDtype::kU8), 1);
}

TEST(RngFillTest, OffsetAdvancesInMultiplesOfFour) {
  EXPECT_EQ(RngOffsetIncrement({RngDtype::kF32, RngKind::kUniform, 1, 0, 1}), 4u);
  EXPECT_EQ(RngOffsetIncrement({RngDtype::kF32, RngKind::kUniform, 9, 0, 1}), 12u);
  EXPECT_EQ(RngOffsetIncrement({RngDtype::kU8, RngKind::kBits, 4, 0, 0}), 4u);
  EXPECT_EQ(RngOffsetIncrement({RngDtype::kF64, RngKind::kNormal, 3, 0, 1}), 8u);
  EXPECT_EQ(RngOffsetIncrement({RngDtype::kI64, RngKind::kUniform, 4, 0, 9}), 8u);
  for (const RngRequest& r : AllRequestShapes(7))
    EXPECT_EQ(RngOffsetIncrement(r) % 4, 0u) << Describe(r);
}

TEST(RngFillTest, RawBitsAreTheKnownAnswerWordsLittleEndian) {
  // Seed 0, offset 0: block 0 is Random123's all-zero known answer.
  EXPECT_THAT(As<uint32_t>(Fill({RngDtype::kI32, RngKind::kBits, 4}, 0, 0)),
              ElementsAre(0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u));
  EXPECT_THAT(As<uint64_t>(Fill({RngDtype::kI64, RngKind::kBits, 2}, 0, 0)),
              ElementsAre(0xe169c58d6627e8d5u, 0x9b00dbd8bc57ac4cu));
  EXPECT_THAT(As<uint16_t>(Fill({RngDtype::kF16, RngKind::kBits, 4}, 0, 0)),
              ElementsAre(0xe8d5, 0xc58d, 0xac4c, 0xdbd8));
  EXPECT_THAT(Fill({RngDtype::kU8, RngKind::kBits, 4}, 0, 0), ElementsAre(0xd5, 0x8d, 0x4c, 0xd8));
}

TEST(RngFillTest, UniformOfKnownAnswerWords) {
  EXPECT_THAT(As<float>(Fill({RngDtype::kF32, RngKind::kUniform, 2, 0.0, 1.0}, 0, 0)),
              ElementsAre(std::ldexp(static_cast<float>(0x6627e8d5u >> 8), -24),
                          std::ldexp(static_cast<float>(0xe169c58du >> 8), -24)));
  const uint64_t m = (uint64_t{0x6627e8d5u >> 5} << 26) | (0xe169c58du >> 6);
  EXPECT_THAT(As<double>(Fill({RngDtype::kF64, RngKind::kUniform, 1, 0.0, 1.0}, 0, 0)),
              ElementsAre(std::ldexp(static_cast<double>(m), -53)));
}

TEST(RngFillTest, MatchesPerElementReferenceForEveryShape) {
  for (uint64_t n : {1, 2, 3, 5, 8, 1001}) {
    for (const RngRequest& r : AllRequestShapes(n)) {
      EXPECT_EQ(Fill(r, 0x0123456789ABCDEF, 16), Reference(r, 0x0123456789ABCDEF, 16))
          << Describe(r) << " n " << n;
    }
  }
}

TEST(RngFillTest, CallAtOffsetEightIsTailOfCallAtZeroShiftedTwoBlocks) {
  for (RngRequest r : AllRequestShapes(40)) {
    const size_t size = RngElementSize(r.dtype);
    const uint64_t shift = 8 / RngWordsPerElement(r.dtype);  // elements in two blocks
    const std::vector<unsigned char> from_zero = Fill(r, 99, 0);
    r.elements -= shift;
    const std::vector<unsigned char> from_eight = Fill(r, 99, 8);
    EXPECT_TRUE(std::equal(from_eight.begin(), from_eight.end(), from_zero.begin() + shift * size))
        << Describe(r);
  }
}

TEST(RngFillTest, ConsecutiveCallsEqualOneBigCall) {
  for (RngRequest r : AllRequestShapes(160)) {
    const std::vector<unsigned char> whole = Fill(r, 7, 4);
    r.elements = 100;
    std::vector<unsigned char> parts = Fill(r, 7, 4);
    const uint64_t next = 4 + RngOffsetIncrement(r);
    r.elements = 60;
    const std::vector<unsigned char> rest = Fill(r, 7, next);
    parts.insert(parts.end(), rest.begin(), rest.end());
    EXPECT_EQ(parts, whole) << Describe(r);
  }
}

TEST(RngFillTest, OddNormalCountIsPrefixOfEvenCount) {
  for (RngDtype dtype : {RngDtype::kF32, RngDtype::kF64, RngDtype::kF16, RngDtype::kBF16}) {
    const std::vector<unsigned char> six = Fill({dtype, RngKind::kNormal, 6, 0.0, 1.0}, 5, 0);
    const std::vector<unsigned char> five = Fill({dtype, RngKind::kNormal, 5, 0.0, 1.0}, 5, 0);
    EXPECT_TRUE(std::equal(five.begin(), five.end(), six.begin())) << static_cast<int>(dtype);
  }
}

TEST(RngFillTest, SameSeedAndOffsetGiveSameBitsOthersDiffer) {
  for (const RngRequest& r : AllRequestShapes(64)) {
    const std::vector<unsigned char> first = Fill(r, 2024, 12);
    EXPECT_EQ(Fill(r, 2024, 12), first) << Describe(r);
    EXPECT_NE(Fill(r, 2025, 12), first) << Describe(r);
    EXPECT_NE(Fill(r, 2024, 16), first) << Describe(r);
    EXPECT_NE(Fill(r, 2024 + (uint64_t{1} << 32), 12), first)
        << Describe(r);  // high seed word is keyed
  }
}

TEST(RngFillTest, UniformFloatsStayInLowHigh) {
  struct Case {
    RngDtype dtype;
    uint64_t n;
    double tolerance;       // how close min/max get to the bounds
    double mean_tolerance;  // bf16: draws within half an ulp (2^-7) of 3 become -2, biasing the
                            // mean by -0.008
  };
  for (const Case& c :
       {Case{RngDtype::kF32, 1000000, 1e-5, 0.01}, Case{RngDtype::kF64, 1000000, 1e-5, 0.01},
        Case{RngDtype::kF16, 200000, 0.01, 0.02}, Case{RngDtype::kBF16, 200000, 0.05, 0.03}}) {
    const std::vector<double> v =
        AsDoubles(c.dtype, Fill({c.dtype, RngKind::kUniform, c.n, -2.0, 3.0}, 11, 0));
    const auto [min, max] = std::minmax_element(v.begin(), v.end());
    EXPECT_GE(*min, -2.0) << static_cast<int>(c.dtype);
    EXPECT_LT(*max, 3.0) << static_cast<int>(c.dtype);
    EXPECT_LT(*min, -2.0 + c.tolerance) << static_cast<int>(c.dtype);
    EXPECT_GT(*max, 3.0 - c.tolerance) << static_cast<int>(c.dtype);
    double sum = 0;
    for (double d : v) sum += d;
    EXPECT_NEAR(sum / v.size(), 0.5, c.mean_tolerance) << static_cast<int>(c.dtype);
  }
}

TEST(RngFillTest, HalfUniformNeverReachesHighAfterRounding) {
  // [0, 1) in f16: raw f32 values above 1 - 2^-12 round to 1.0 and must map
  // back to low.
  const std::vector<uint16_t> h =
      As<uint16_t>(Fill({RngDtype::kF16, RngKind::kUniform, 1 << 20, 0.0, 1.0}, 3, 0));
  int zeros = 0;
  for (uint16_t bits : h) {
    ASSERT_LT(HalfBitsToFloat(bits), 1.0f);
    ASSERT_GE(HalfBitsToFloat(bits), 0.0f);
    zeros += bits == 0;
  }
  EXPECT_GT(zeros, 100);  // ~2^20 * 2^-12 remapped draws plus genuine small values
}

TEST(RngFillTest, NormalMomentsMatch) {
  for (RngDtype dtype : {RngDtype::kF32, RngDtype::kF64, RngDtype::kF16, RngDtype::kBF16}) {
    for (const auto& [mean, stddev] : {std::pair{0.0, 1.0}, std::pair{3.0, 2.0}}) {
      const std::vector<double> v =
          AsDoubles(dtype, Fill({dtype, RngKind::kNormal, 1000000, mean, stddev}, 77, 0));
      double sum = 0, sum_sq = 0;
      for (double d : v) {
        ASSERT_TRUE(std::isfinite(d));
        sum += d;
        sum_sq += d * d;
      }
      const double m = sum / v.size();
      const double s = std::sqrt(sum_sq / v.size() - m * m);
      EXPECT_NEAR((m - mean) / stddev, 0.0, 0.005) << static_cast<int>(dtype) << " mean " << mean;
      EXPECT_NEAR(s / stddev, 1.0, 0.005) << static_cast<int>(dtype) << " mean " << mean;
    }
  }
}

TEST(RngFillTest, IntegersCoverTheirRangeIncludingNegativeLow) {
  const std::vector<int32_t> i32 =
      As<int32_t>(Fill({RngDtype::kI32, RngKind::kUniform, 10000, -5, 7}, 1, 0));
  EXPECT_EQ(std::set<int32_t>(i32.begin(), i32.end()),
            (std::set<int32_t>{-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6}));

  const double low64 = -1099511627776.0;  // -2^40
  const std::vector<int64_t> i64 =
      As<int64_t>(Fill({RngDtype::kI64, RngKind::kUniform, 1000, low64, low64 + 3}, 1, 0));
  EXPECT_EQ(std::set<int64_t>(i64.begin(), i64.end()),
            (std::set<int64_t>{-1099511627776, -1099511627775, -1099511627774}));

  const std::vector<unsigned char> u8 =
      Fill({RngDtype::kU8, RngKind::kUniform, 10000, 250, 256}, 1, 0);
  EXPECT_EQ(std::set<unsigned char>(u8.begin(), u8.end()),
            (std::set<unsigned char>{250, 251, 252, 253, 254, 255}));
}

TEST(RngFillTest, FullIntegerRangesAreRawBitsShiftedByLow) {
  const std::vector<uint32_t> bits32 =
      As<uint32_t>(Fill({RngDtype::kI32, RngKind::kBits, 64}, 8, 0));
  const std::vector<int32_t> i32 =
      As<int32_t>(Fill({RngDtype::kI32, RngKind::kUniform, 64, -2147483648.0, 2147483648.0}, 8, 0));
  const std::vector<uint64_t> bits64 =
      As<uint64_t>(Fill({RngDtype::kI64, RngKind::kBits, 64}, 8, 0));
  const std::vector<int64_t> i64 = As<int64_t>(
      Fill({RngDtype::kI64, RngKind::kUniform, 64, -9223372036854775808.0, 9223372036854775808.0},
           8, 0));
  const std::vector<unsigned char> raw8 = Fill({RngDtype::kU8, RngKind::kBits, 64}, 8, 0);
  const std::vector<unsigned char> u8 = Fill({RngDtype::kU8, RngKind::kUniform, 64, 0, 256}, 8, 0);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(static_cast<uint32_t>(i32[i]), bits32[i] ^ 0x80000000u);
    EXPECT_EQ(static_cast<uint64_t>(i64[i]), bits64[i] ^ 0x8000000000000000u);
    EXPECT_EQ(u8[i], raw8[i]);
  }
}

TEST(RngFillTest, ValidationRejectsBadRequests) {
  using absl::StatusCode;
  const auto invalid = [](const RngRequest& r, const std::string& message) {
    EXPECT_THAT(ValidateRngRequest(r), StatusIs(StatusCode::kInvalidArgument, HasSubstr(message)))
        << message;
  };
  const double inf = INFINITY;
  invalid({RngDtype::kF32, RngKind::kUniform, 0, 0, 1}, "elements is 0");
  invalid({RngDtype::kF32, RngKind::kUniform, kMaxRngElements + 1, 0, 1},
          "above the limit of 2^60");
  invalid({static_cast<RngDtype>(42), RngKind::kUniform, 1, 0, 1}, "unknown RngDtype 42");
  invalid({RngDtype::kF32, static_cast<RngKind>(9), 1, 0, 1}, "unknown RngKind 9");
  invalid({RngDtype::kF32, RngKind::kUniform, 1, 1, 1},
          "uniform needs low < high, got low=1 high=1");
  invalid({RngDtype::kF64, RngKind::kUniform, 1, 2, 1},
          "uniform needs low < high, got low=2 high=1");
  invalid({RngDtype::kF32, RngKind::kUniform, 1, 0, inf},
          "uniform low and high must be finite, got low=0 high=inf");
  invalid({RngDtype::kF32, RngKind::kUniform, 1, NAN, 1}, "must be finite");
  invalid({RngDtype::kF32, RngKind::kUniform, 1, 1, 1 + 1e-9},
          "uniform f32 low and high round to 1 and 1");
  invalid({RngDtype::kF16, RngKind::kUniform, 1, 1, 1.0001},
          "uniform f16 low and high round to 1 and 1");
  invalid({RngDtype::kF16, RngKind::kUniform, 1, 0, 70000},
          "uniform f16 bounds must lie within [-65504, 65504]");
  invalid({RngDtype::kF32, RngKind::kUniform, 1, 0, 1e39}, "uniform f32 bounds must lie within");
  invalid({RngDtype::kF32, RngKind::kUniform, 1, -3e38, 3e38}, "uniform f32 high - low = 6");
  invalid({RngDtype::kF32, RngKind::kUniform, 1, -3e38, 3e38},
          "overflows f32 (max 3.4028234663852886e+38)");
  invalid({RngDtype::kBF16, RngKind::kUniform, 1, -3e38, 3e38}, "overflows f32");
  invalid({RngDtype::kF64, RngKind::kUniform, 1, -1e308, 1e308},
          "uniform f64 high - low = inf overflows f64");
  invalid({RngDtype::kI32, RngKind::kUniform, 1, 0.5, 3},
          "uniform i32 bounds must be integers, got low=0.5");
  invalid({RngDtype::kI32, RngKind::kUniform, 1, -2147483649.0, 0},
          "uniform i32 needs -2147483648 <= low < high <= 2147483648");
  invalid({RngDtype::kI32, RngKind::kUniform, 1, 0, 2147483649.0}, "uniform i32 needs");
  invalid({RngDtype::kI64, RngKind::kUniform, 1, 0, 1.8446744073709552e19}, "uniform i64 needs");
  invalid({RngDtype::kU8, RngKind::kUniform, 1, -1, 5},
          "uniform u8 needs 0 <= low < high <= 256, got low=-1 high=5");
  invalid({RngDtype::kU8, RngKind::kUniform, 1, 0, 257}, "uniform u8 needs");
  invalid({RngDtype::kF32, RngKind::kNormal, 1, 0, -1}, "normal std must be >= 0, got std=-1");
  invalid({RngDtype::kF32, RngKind::kNormal, 1, inf, 1},
          "normal mean and std must be finite, got mean=inf std=1");
  invalid({RngDtype::kI32, RngKind::kNormal, 1, 0, 1},
          "normal needs a floating dtype (f32, f64, f16, bf16), got i32");
  invalid({RngDtype::kBF16, RngKind::kNormal, 1, 1e39, 1}, "normal bf16 is computed in f32");
}

TEST(RngFillTest, ValidationAcceptsEdgeRequests) {
  EXPECT_OK(ValidateRngRequest({RngDtype::kF16, RngKind::kUniform, 1, -65504, 65504}));
  EXPECT_OK(ValidateRngRequest({RngDtype::kF32, RngKind::kUniform, 1, -1e38, 1e38}));
  EXPECT_OK(ValidateRngRequest({RngDtype::kF64, RngKind::kUniform, 1, -1e307, 1e307}));
  EXPECT_OK(
      ValidateRngRequest({RngDtype::kI32, RngKind::kUniform, 1, -2147483648.0, 2147483648.0}));
  EXPECT_OK(ValidateRngRequest(
      {RngDtype::kI64, RngKind::kUniform, 1, -9223372036854775808.0, 9223372036854775808.0}));
  EXPECT_OK(ValidateRngRequest({RngDtype::kU8, RngKind::kUniform, 1, 0, 256}));
  EXPECT_OK(ValidateRngRequest({RngDtype::kF32, RngKind::kNormal, 1, 0, 0}));    // std 0: all mean
  EXPECT_OK(ValidateRngRequest({RngDtype::kI64, RngKind::kBits, 1, NAN, NAN}));  // bits ignore a, b
  EXPECT_OK(ValidateRngRequest({RngDtype::kF32, RngKind::kUniform, kMaxRngElements, 0, 1}));
}

}  // namespace
}  // namespace gpumux
