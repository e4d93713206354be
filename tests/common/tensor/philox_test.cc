#include "common/tensor/philox.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

struct Kat {
  uint32_t counter[4];
  uint32_t key[2];
  uint32_t expected[4];
};

// Random123's kat_vectors, the three "philox4x32 10" lines.
constexpr Kat kKats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  for (const Kat& kat : kKats) {
    EXPECT_THAT(Philox4x32(kat.counter, kat.key).words, ElementsAreArray(kat.expected));
  }
}

TEST(PhiloxTest, StreamBlockPutsBlockInCounterLowWordsAndSeedInKey) {
  EXPECT_THAT(PhiloxStreamBlock(0, 0).words, ElementsAreArray(kKats[0].expected));
  const uint64_t seed = 0x299f31d0a4093822;
  const uint64_t block = 0x85a308d3243f6a88;
  const uint32_t counter[4] = {0x243f6a88, 0x85a308d3, 0, 0};
  const uint32_t key[2] = {0xa4093822, 0x299f31d0};
  EXPECT_THAT(PhiloxStreamBlock(seed, block).words,
              ElementsAreArray(Philox4x32(counter, key).words));
}

TEST(PhiloxTest, StreamWordIndexesBlocksFromOffsetOverFour) {
  const uint64_t seed = 12345;
  for (uint64_t k = 0; k < 32; ++k) {
    EXPECT_EQ(PhiloxStreamWord(seed, 0, k), PhiloxStreamBlock(seed, k / 4).words[k % 4]) << k;
    // A call at offset 8 starts two blocks later.
    EXPECT_EQ(PhiloxStreamWord(seed, 8, k), PhiloxStreamWord(seed, 0, k + 8)) << k;
  }
  EXPECT_EQ(PhiloxStreamWord(0, 0, 1), 0xe169c58du);
}

TEST(PhiloxTest, OffsetIncrementRoundsWordsUpToMultipleOfFour) {
  EXPECT_EQ(PhiloxOffsetIncrement(0, 1), 0u);
  EXPECT_EQ(PhiloxOffsetIncrement(1, 1), 4u);
  EXPECT_EQ(PhiloxOffsetIncrement(4, 1), 4u);
  EXPECT_EQ(PhiloxOffsetIncrement(5, 1), 8u);
  EXPECT_EQ(PhiloxOffsetIncrement(1, 2), 4u);
  EXPECT_EQ(PhiloxOffsetIncrement(2, 2), 4u);
  EXPECT_EQ(PhiloxOffsetIncrement(3, 2), 8u);
  EXPECT_EQ(PhiloxOffsetIncrement(1000001, 1), 1000004u);
  for (uint64_t n = 0; n < 100; ++n) {
    EXPECT_EQ(PhiloxOffsetIncrement(n, 1) % 4, 0u);
    EXPECT_EQ(PhiloxOffsetIncrement(n, 2) % 4, 0u);
    // Odd normal calls read their last element's partner word: covered.
    EXPECT_GE(PhiloxOffsetIncrement(n, 1), (n + 1) / 2 * 2);
    EXPECT_GE(PhiloxOffsetIncrement(n, 2), (n + 1) / 2 * 4);
  }
}

TEST(PhiloxTest, UnitIntervalsUseTopBits) {
  EXPECT_EQ(UnitFloatFromWord(0), 0.0f);
  EXPECT_EQ(UnitFloatFromWord(0xFF), 0.0f);
  EXPECT_EQ(UnitFloatFromWord(0x100), std::ldexp(1.0f, -24));
  EXPECT_EQ(UnitFloatFromWord(0xFFFFFFFF), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_EQ(UnitDoubleFromWords(0, 0), 0.0);
  EXPECT_EQ(UnitDoubleFromWords(0, 0x40), std::ldexp(1.0, -53));
  EXPECT_EQ(UnitDoubleFromWords(0x20, 0), std::ldexp(1.0, -27));
  EXPECT_EQ(UnitDoubleFromWords(0xFFFFFFFF, 0xFFFFFFFF), 1.0 - std::ldexp(1.0, -53));
}

TEST(PhiloxTest, UniformFloatMapsRoundingToHighBackToLow) {
  EXPECT_EQ(UniformFloatFromWord(0xFFFFFFFF, 0.0f, 1.0f), 1.0f - std::ldexp(1.0f, -24));
  // 1 + (1 - 2^-24) ties to 2.0f = high, so it becomes low.
  EXPECT_EQ(UniformFloatFromWord(0xFFFFFFFF, 1.0f, 2.0f), 1.0f);
  EXPECT_EQ(UniformFloatFromWord(0x80000000, -1.0f, 1.0f), 0.0f);
  EXPECT_EQ(UniformDoubleFromWords(0xFFFFFFFF, 0xFFFFFFFF, 1.0, 2.0), 1.0);
  EXPECT_EQ(UniformDoubleFromWords(0x80000000, 0, 10.0, 20.0), 15.0);
  // f16/bf16: 1 - 2^-24 rounds to 1.0 = high, so it becomes low.
  EXPECT_EQ(UniformHalfFromWord(0xFFFFFFFF, 0.0f, 1.0f), 0x0000);
  EXPECT_EQ(UniformBFloat16FromWord(0xFFFFFFFF, 0.0f, 1.0f), 0x0000);
  EXPECT_EQ(UniformHalfFromWord(0xFFFFFFFF, -3.0f, 1.0f), 0xC200);  // -3
  EXPECT_EQ(UniformHalfFromWord(0x80000000, 0.0f, 1.0f), 0x3800);   // 0.5
  EXPECT_EQ(UniformBFloat16FromWord(0x80000000, 0.0f, 1.0f), 0x3F00);
}

TEST(PhiloxTest, UniformIntegersAreLowPlusBitsModRange) {
  EXPECT_EQ(UniformInt32FromWord(7, -3, 5), -1);
  EXPECT_EQ(UniformInt32FromWord(0xFFFFFFFF, -3, 5), -3);  // 4294967295 % 5 == 0
  // Range 2^32 (passed as 0): bits as they are, plus low.
  EXPECT_EQ(UniformInt32FromWord(0xFFFFFFFF, std::numeric_limits<int32_t>::min(), 0),
            std::numeric_limits<int32_t>::max());
  EXPECT_EQ(UniformInt32FromWord(0, std::numeric_limits<int32_t>::min(), 0),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(UniformInt64FromWords(5, 0, -10, 3), -8);
  EXPECT_EQ(UniformInt64FromWords(0, 1, 0, 3), (int64_t{1} << 32) % 3);  // w1 is the high word
  EXPECT_EQ(UniformInt64FromWords(0xFFFFFFFF, 0xFFFFFFFF, std::numeric_limits<int64_t>::min(), 0),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(UniformUint8FromWord(300, 0, 256), 44);
  EXPECT_EQ(UniformUint8FromWord(13, 250, 6), 251);
}

TEST(PhiloxTest, NormalPairIsBoxMuller) {
  // u1 = 2^31 * 2^-32 = 0.5: radius sqrt(2 ln 2).
  const double radius = std::sqrt(2.0 * std::log(2.0));
  FloatPair z = NormalFloatPairFromWords(0x7FFFFFFF, 0, 0.0f, 1.0f);
  EXPECT_NEAR(z.first, radius, 1e-6);
  EXPECT_EQ(z.second, 0.0f);
  z = NormalFloatPairFromWords(0x7FFFFFFF, 0x40000000, 3.0f, 2.0f);  // u2 = 1/4
  EXPECT_NEAR(z.first, 3.0, 1e-6);
  EXPECT_NEAR(z.second, 3.0 + 2.0 * radius, 1e-6);
  // u1 = 1 (largest word): radius 0, both samples equal the mean.
  z = NormalFloatPairFromWords(0xFFFFFFFF, 0x12345678, 5.0f, 7.0f);
  EXPECT_EQ(z.first, 5.0f);
  EXPECT_EQ(z.second, 5.0f);
  // The smallest u1 (2^-32) is still finite.
  z = NormalFloatPairFromWords(0, 0, 0.0f, 1.0f);
  EXPECT_NEAR(z.first, std::sqrt(64.0 * std::log(2.0)), 1e-5);

  // f64: u1 = (m + 1) * 2^-53 with m = 2^52 - 1 gives 0.5.
  const uint64_t m = (uint64_t{1} << 52) - 1;
  const uint32_t a0 = static_cast<uint32_t>(m >> 26) << 5;
  const uint32_t a1 = static_cast<uint32_t>(m & ((1u << 26) - 1)) << 6;
  ASSERT_EQ(Unit53Bits(a0, a1), m);
  DoublePair d = NormalDoublePairFromWords(a0, a1, 0x40000000, 0, -1.0, 0.5);  // u2 = 1/4
  EXPECT_NEAR(d.first, -1.0, 1e-15);
  EXPECT_NEAR(d.second, -1.0 + 0.5 * radius, 1e-15);
}

TEST(PhiloxTest, FloatToHalfTable) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7C00);  // tie to even: overflows
  EXPECT_EQ(FloatToHalfBits(1e6f), 0x7C00);
  EXPECT_EQ(FloatToHalfBits(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::infinity()), 0x7C00);
  const uint16_t nan = FloatToHalfBits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(FloatToHalfBits(BitsToFloat(0x7F800001)) & 0x03FF, 0);  // signalling NaN stays NaN
  // Ties to even.
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Subnormals: units of 2^-24.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even
  EXPECT_EQ(FloatToHalfBits(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -24)), 0x0002);  // tie to even
  EXPECT_EQ(FloatToHalfBits(std::ldexp(2.5f, -24)), 0x0002);  // tie to even
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1023.0f, -24)), 0x03FF);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(PhiloxTest, HalfToFloatTable) {
  EXPECT_EQ(HalfBitsToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfBitsToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfBitsToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(FloatToBits(HalfBitsToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(HalfBitsToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfBitsToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7C01)));
}

TEST(PhiloxTest, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(f)))) << std::hex << h;
    } else {
      EXPECT_EQ(FloatToHalfBits(f), h) << std::hex << h;
    }
  }
}

#if defined(__FLT16_MAX__) && !defined(__CUDACC__)
// The compiler's own float -> _Float16 conversion (correctly rounded) as an
// independent oracle, over a stride of all float bit patterns.
TEST(PhiloxTest, FloatToHalfMatchesCompilerFloat16) {
  for (uint64_t x = 0; x <= 0xFFFFFFFFu; x += 251) {
    const float f = BitsToFloat(static_cast<uint32_t>(x));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    static_assert(sizeof(h) == sizeof(expected));
    __builtin_memcpy(&expected, &h, sizeof(expected));
    ASSERT_EQ(FloatToHalfBits(f), expected) << std::hex << x;
  }
}
#endif

TEST(PhiloxTest, BFloat16Table) {
  EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16Bits(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBFloat16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie to even
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie to even
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::max()), 0x7F80);  // overflows
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x7F7F7FFF)), 0x7F7F);            // largest finite
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBFloat16Bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x7FC00000)), 0x7FC0);
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x7F800001)), 0x7FC0);  // signalling NaN stays NaN
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0xFF800001)), 0xFFC0);
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x00018000)), 0x0002);  // subnormal tie to even
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x00008000)), 0x0000);  // tie to even
  EXPECT_EQ(FloatToBFloat16Bits(BitsToFloat(0x00008001)), 0x0001);
  EXPECT_EQ(BFloat16BitsToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BFloat16BitsToFloat(0x0001), BitsToFloat(0x00010000));
  EXPECT_EQ(BFloat16BitsToFloat(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(0x7FC0)));
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = BFloat16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBFloat16Bits(f), b) << std::hex << b;
  }
}

TEST(PhiloxTest, BitCastsRoundTrip) {
  EXPECT_EQ(FloatToBits(1.0f), 0x3F800000u);
  EXPECT_EQ(BitsToFloat(0xC0000000u), -2.0f);
  EXPECT_THAT((PhiloxBlock{{1, 2, 3, 4}}.words), ElementsAre(1u, 2u, 3u, 4u));
}

}  // namespace
}  // namespace gpumux
