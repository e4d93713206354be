#pragma once

// gpumux's random number generator, compiled unchanged by the host backend
// (g++) and by CUDA kernels (nvcc), so both produce the same bits for the same
// (seed, offset). It follows PyTorch's CUDA generator in shape (Philox4x32-10,
// state = {seed, offset}, offset a multiple of 4) but defines its own stream
// layout, which, unlike PyTorch's, does not depend on the device's SM count.
//
// The stream. key = {lo32(seed), hi32(seed)}. A call that generates n elements
// of w 32-bit words each (w = 2 for f64/i64, 1 otherwise) at generator offset
// `offset` uses the Philox blocks with counter {lo32(b), hi32(b), 0, 0} for
// b = offset/4 + j, j in [0, ceil(n*w/4)). Word k of the call is out[k % 4] of
// block offset/4 + k/4, and element i owns words [i*w, i*w + w). Afterwards
// the offset advances by PhiloxOffsetIncrement(n, w) = 4*ceil(n*w/4).
//
// Per-element transforms (each element reads only its own words, so any split
// of elements over threads or calls yields the same bits):
// - uniform f32 [low, high): v = (word >> 8) * 2^-24, r = fmaf(v, high - low,
//   low) (one rounding, so FMA contraction cannot change it); r >= high, which
//   rounding can produce, becomes low.
// - uniform f64: v = ((w0 >> 5) * 2^26 + (w1 >> 6)) * 2^-53, then as f32 with
//   fma in double.
// - f16 / bf16: the f32 result, rounded to nearest-even; a value that rounds to
//   >= high becomes round(low). Values lie in [round(low), high).
// - normal (mean, std): Box-Muller on element pairs (2m, 2m+1): u1 = (a+1)*2^-32
//   in (0, 1] from element 2m's word a, u2 = b*2^-32 from element 2m+1's word b;
//   z0 = sqrt(-2 ln u1) cos(2 pi u2), z1 = sqrt(-2 ln u1) sin(2 pi u2), output
//   fma(stddev, z, mean). float math for f32/f16/bf16; f64 uses the 53-bit units
//   above (u1 = (m+1)*2^-53) and double math.
// - integers [low, high): low + bits % (high - low), modulo 2^width, like
//   PyTorch's random_(from, to) (and as biased as it). bits is the element's
//   word, or w0 | w1 << 32 for i64. A range of 2^32 (i32) or 2^64 (i64) takes
//   bits as they are.
// - raw bits: the element's words stored as-is, little-endian (an f64/i64
//   element is w0 | w1 << 32); 2-byte and 1-byte elements take the low 16 or 8
//   bits of their word.
//
// Bit-identity. Philox, uniform (all dtypes), integers and raw bits use only
// integer ops, int-to-float conversions, power-of-two scaling and fma: they
// are bit-identical on host and device (checked on an H200 against glibc).
// Normal output calls logf/cosf/sinf (log/cos/sin), whose CUDA and glibc
// versions differ in the last 1-2 ulp, so normal samples are NOT bit-identical:
// about 9% of f32 and 6% of f64 samples differ, by at most ~4 ulp of
// std * max(|z|, 1) (more ulps of the sample itself where mean + std*z cancels).
// Device code must be built without --use_fast_math / -ftz=true.

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define GPUMUX_HOST_DEVICE __host__ __device__
#else
#define GPUMUX_HOST_DEVICE
#endif

namespace gpumux {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

// One Philox output block: four 32-bit words.
struct PhiloxBlock {
  uint32_t words[4];
};

// Two Box-Muller outputs of one element pair.
struct FloatPair {
  float first;
  float second;
};
struct DoublePair {
  double first;
  double second;
};

// ---- Bit casts (no memcpy, no std::bit_cast: both must work in device code).

GPUMUX_HOST_DEVICE inline uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  union {
    float f;
    uint32_t u;
  } pun;
  pun.f = f;
  return pun.u;
#endif
}

GPUMUX_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  union {
    uint32_t u;
    float f;
  } pun;
  pun.u = u;
  return pun.f;
#endif
}

// ---- Philox4x32-10, exactly as Random123's philox4x32_R(10, counter, key).

GPUMUX_HOST_DEVICE inline PhiloxBlock Philox4x32(const uint32_t counter[4], const uint32_t key[2]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < kPhiloxRounds; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// Block `block` of the stream for `seed`: counter {lo32(block), hi32(block),
// 0, 0}, key {lo32(seed), hi32(seed)}.
GPUMUX_HOST_DEVICE inline PhiloxBlock PhiloxStreamBlock(uint64_t seed, uint64_t block) {
  const uint32_t counter[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u,
                               0u};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return Philox4x32(counter, key);
}

// Word `index` of a call made at generator offset `offset` (a multiple of 4).
// One Philox block per call: kernels should take four words per block instead.
GPUMUX_HOST_DEVICE inline uint32_t PhiloxStreamWord(uint64_t seed, uint64_t offset,
                                                    uint64_t index) {
  return PhiloxStreamBlock(seed, offset / 4 + index / 4).words[index % 4];
}

// How far a call of `elements` elements of `words_per_element` (1 or 2) words
// advances the generator offset: 4 * ceil(elements * words_per_element / 4).
// This also covers the partner word of an odd trailing normal element.
GPUMUX_HOST_DEVICE inline uint64_t PhiloxOffsetIncrement(uint64_t elements, int words_per_element) {
  const uint64_t words = elements * static_cast<uint64_t>(words_per_element);
  return (words + 3) / 4 * 4;
}

// ---- Unit intervals.

// (word >> 8) * 2^-24: a float in [0, 1 - 2^-24], exact.
GPUMUX_HOST_DEVICE inline float UnitFloatFromWord(uint32_t word) {
  return static_cast<float>(word >> 8) * 5.9604644775390625e-8f;  // 2^-24
}

// The 53-bit integer ((w0 >> 5) << 26) | (w1 >> 6).
GPUMUX_HOST_DEVICE inline uint64_t Unit53Bits(uint32_t w0, uint32_t w1) {
  return (static_cast<uint64_t>(w0 >> 5) << 26) | (w1 >> 6);
}

// Unit53Bits(w0, w1) * 2^-53: a double in [0, 1 - 2^-53], exact.
GPUMUX_HOST_DEVICE inline double UnitDoubleFromWords(uint32_t w0, uint32_t w1) {
  return static_cast<double>(Unit53Bits(w0, w1)) *
         1.1102230246251565404236316680908203125e-16;  // 2^-53
}

// ---- f16 and bf16 conversions, round to nearest even.

// IEEE binary16 bits of `f`: NaN stays NaN (quiet, sign and top payload bits
// kept), |f| >= 65520 becomes inf, tiny values become subnormals or zero.
GPUMUX_HOST_DEVICE inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    const uint32_t nan_bits = abs > 0x7F800000u ? 0x0200u | ((abs >> 13) & 0x03FFu) : 0u;
    return static_cast<uint16_t>(sign | 0x7C00u | nan_bits);
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (abs >= 0x38800000u) {                                              // >= 2^-14: normal
    uint32_t h = (abs - 0x38000000u) >> 13;  // rebias exponent 127 -> 15, keep 10 bits
    const uint32_t rest = abs & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
    return static_cast<uint16_t>(sign | h);
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: ties to +-0
  // Subnormal: f = mant * 2^(e-150) and the result counts units of 2^-24, so
  // shift mant right by 126 - e (14..24) and round.
  const uint32_t e = abs >> 23;
  const uint32_t mant = (abs & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126u - e;
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // 0x400 is the smallest normal
  return static_cast<uint16_t>(sign | h);
}

GPUMUX_HOST_DEVICE inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x03FFu;
  if (exp == 0x1Fu) return BitsToFloat(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return BitsToFloat(sign);
  uint32_t e = 113;  // mant * 2^-24 = (mant / 1024) * 2^-14; normalise to 1.x
  while ((mant & 0x0400u) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsToFloat(sign | (e << 23) | ((mant & 0x03FFu) << 13));
}

// bfloat16 bits of `f` (the high half of an f32, rounded): NaN stays NaN.
GPUMUX_HOST_DEVICE inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

GPUMUX_HOST_DEVICE inline float BFloat16BitsToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

// ---- Uniform floats. Preconditions (ValidateRngRequest checks them): low <
// high, both finite, high - low finite in the compute type.

GPUMUX_HOST_DEVICE inline float UniformFloatFromWord(uint32_t word, float low, float high) {
  const float r = fmaf(UnitFloatFromWord(word), high - low, low);
  return r >= high ? low : r;
}

GPUMUX_HOST_DEVICE inline double UniformDoubleFromWords(uint32_t w0, uint32_t w1, double low,
                                                        double high) {
  const double r = fma(UnitDoubleFromWords(w0, w1), high - low, low);
  return r >= high ? low : r;
}

// Also needs FloatToHalfBits(low) < FloatToHalfBits(high) as numbers.
GPUMUX_HOST_DEVICE inline uint16_t UniformHalfFromWord(uint32_t word, float low, float high) {
  const uint16_t h = FloatToHalfBits(UniformFloatFromWord(word, low, high));
  return HalfBitsToFloat(h) >= high ? FloatToHalfBits(low) : h;
}

GPUMUX_HOST_DEVICE inline uint16_t UniformBFloat16FromWord(uint32_t word, float low, float high) {
  const uint16_t b = FloatToBFloat16Bits(UniformFloatFromWord(word, low, high));
  return BFloat16BitsToFloat(b) >= high ? FloatToBFloat16Bits(low) : b;
}

// ---- Uniform integers: low + bits % range, wrapping; range 0 stands for
// 2^32 (2^64 for i64), i.e. bits as they are.

GPUMUX_HOST_DEVICE inline int32_t UniformInt32FromWord(uint32_t word, int32_t low, uint32_t range) {
  const uint32_t draw = range == 0 ? word : word % range;
  return static_cast<int32_t>(static_cast<uint32_t>(low) + draw);
}

GPUMUX_HOST_DEVICE inline int64_t UniformInt64FromWords(uint32_t w0, uint32_t w1, int64_t low,
                                                        uint64_t range) {
  const uint64_t bits = static_cast<uint64_t>(w0) | (static_cast<uint64_t>(w1) << 32);
  const uint64_t draw = range == 0 ? bits : bits % range;
  return static_cast<int64_t>(static_cast<uint64_t>(low) + draw);
}

// range in [1, 256], low + range <= 256.
GPUMUX_HOST_DEVICE inline uint8_t UniformUint8FromWord(uint32_t word, uint32_t low,
                                                       uint32_t range) {
  return static_cast<uint8_t>(low + word % range);
}

// ---- Normal (Box-Muller) on an element pair; stddev >= 0.

GPUMUX_HOST_DEVICE inline FloatPair NormalFloatPairFromWords(uint32_t w0, uint32_t w1, float mean,
                                                             float stddev) {
  const float u1 =
      static_cast<float>(static_cast<uint64_t>(w0) + 1u) * 2.3283064365386963e-10f;  // 2^-32
  const float u2 = static_cast<float>(w1) * 2.3283064365386963e-10f;
  const float radius = sqrtf(-2.0f * logf(u1));
  const float theta = 6.28318530717958647692f * u2;
  return FloatPair{fmaf(stddev, radius * cosf(theta), mean),
                   fmaf(stddev, radius * sinf(theta), mean)};
}

// Element 2m's words (a0, a1) and element 2m+1's words (b0, b1).
GPUMUX_HOST_DEVICE inline DoublePair NormalDoublePairFromWords(uint32_t a0, uint32_t a1,
                                                               uint32_t b0, uint32_t b1,
                                                               double mean, double stddev) {
  const double u1 =
      static_cast<double>(Unit53Bits(a0, a1) + 1u) * 1.1102230246251565404236316680908203125e-16;
  const double u2 = UnitDoubleFromWords(b0, b1);
  const double radius = sqrt(-2.0 * log(u1));
  const double theta = 6.28318530717958647692528676655900577 * u2;
  return DoublePair{fma(stddev, radius * cos(theta), mean), fma(stddev, radius * sin(theta), mean)};
}

}  // namespace gpumux
