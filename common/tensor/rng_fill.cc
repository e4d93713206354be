#include "common/tensor/rng_fill.h"

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "common/tensor/philox.h"

namespace gpumux {
namespace {

constexpr double kTwo31 = 2147483648.0;
constexpr double kTwo63 = 9223372036854775808.0;
constexpr double kHalfMax = 65504.0;
constexpr double kBFloat16Max = 3.3895313892515355e38;  // 0x7F7F

const char* DtypeName(RngDtype dtype) {
  switch (dtype) {
    case RngDtype::kF32:
      return "f32";
    case RngDtype::kF64:
      return "f64";
    case RngDtype::kF16:
      return "f16";
    case RngDtype::kBF16:
      return "bf16";
    case RngDtype::kI32:
      return "i32";
    case RngDtype::kI64:
      return "i64";
    case RngDtype::kU8:
      return "u8";
  }
  return "unknown";
}

bool IsFloatDtype(RngDtype dtype) {
  return dtype == RngDtype::kF32 || dtype == RngDtype::kF64 || dtype == RngDtype::kF16 ||
         dtype == RngDtype::kBF16;
}

// Shortest of %.15g / %.17g that reads back as `v`, so messages show values
// that differ only past the sixth digit.
std::string Num(double v) {
  std::string s = absl::StrFormat("%.15g", v);
  if (std::strtod(s.c_str(), nullptr) != v) s = absl::StrFormat("%.17g", v);
  return s;
}

// `v` rounded as FillRandom rounds a bound of a float dtype (via f32 for
// f16/bf16); |v| must be within the dtype's finite range.
double RoundToDtype(double v, RngDtype dtype) {
  const float f = static_cast<float>(v);
  switch (dtype) {
    case RngDtype::kF16:
      return HalfBitsToFloat(FloatToHalfBits(f));
    case RngDtype::kBF16:
      return BFloat16BitsToFloat(FloatToBFloat16Bits(f));
    case RngDtype::kF64:
      return v;
    default:
      return f;
  }
}

absl::Status ValidateUniformFloat(const RngRequest& r) {
  const char* name = DtypeName(r.dtype);
  const double max = r.dtype == RngDtype::kF64    ? DBL_MAX
                     : r.dtype == RngDtype::kF16  ? kHalfMax
                     : r.dtype == RngDtype::kBF16 ? kBFloat16Max
                                                  : static_cast<double>(FLT_MAX);
  if (std::fabs(r.a) > max || std::fabs(r.b) > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("uniform %s bounds must lie within [-%s, %s], got low=%s high=%s", name,
                        Num(max), Num(max), Num(r.a), Num(r.b)));
  }
  const double low = RoundToDtype(r.a, r.dtype);
  const double high = RoundToDtype(r.b, r.dtype);
  if (low >= high) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "uniform %s low and high round to %s and %s, leaving [low, high) empty; widen the range",
        name, Num(low), Num(high)));
  }
  // FillRandom computes high - low in f64 for f64 and in f32 otherwise.
  const double span = r.dtype == RngDtype::kF64 ? r.b - r.a
                                                : static_cast<double>(static_cast<float>(r.b)) -
                                                      static_cast<double>(static_cast<float>(r.a));
  const double span_max = r.dtype == RngDtype::kF64 ? DBL_MAX : static_cast<double>(FLT_MAX);
  if (!std::isfinite(span) || span > span_max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("uniform %s high - low = %s overflows %s (max %s); narrow the range", name,
                        Num(span), r.dtype == RngDtype::kF64 ? "f64" : "f32", Num(span_max)));
  }
  return absl::OkStatus();
}

absl::Status ValidateUniformInt(const RngRequest& r) {
  const char* name = DtypeName(r.dtype);
  if (r.a != std::floor(r.a) || r.b != std::floor(r.b)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "uniform %s bounds must be integers, got low=%s high=%s", name, Num(r.a), Num(r.b)));
  }
  const double min = r.dtype == RngDtype::kI32   ? -kTwo31
                     : r.dtype == RngDtype::kI64 ? -kTwo63
                                                 : 0.0;
  const double end = r.dtype == RngDtype::kI32   ? kTwo31
                     : r.dtype == RngDtype::kI64 ? kTwo63
                                                 : 256.0;
  if (r.a < min || r.b > end) {
    return absl::InvalidArgumentError(
        absl::StrFormat("uniform %s needs %.0f <= low < high <= %.0f, got low=%s high=%s", name,
                        min, end, Num(r.a), Num(r.b)));
  }
  return absl::OkStatus();
}

absl::Status ValidateNormal(const RngRequest& r) {
  const char* name = DtypeName(r.dtype);
  if (!IsFloatDtype(r.dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "normal needs a floating dtype (f32, f64, f16, bf16), got %s; use uniform for integers",
        name));
  }
  if (r.b < 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("normal std must be >= 0, got std=%s", Num(r.b)));
  if (r.dtype != RngDtype::kF64 && (std::fabs(r.a) > FLT_MAX || r.b > FLT_MAX)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "normal %s is computed in f32; mean and std must lie within +-%s, got mean=%s std=%s", name,
        Num(FLT_MAX), Num(r.a), Num(r.b)));
  }
  return absl::OkStatus();
}

// ---- Fill loops. Each Philox block feeds 4 / W consecutive elements.

template <typename T>
void Store(void* out, uint64_t index, T value) {
  std::memcpy(static_cast<unsigned char*>(out) + index * sizeof(T), &value, sizeof(T));
}

// out[i] = value(words of element i), W words per element.
template <typename T, int W, typename Value>
void FillElements(void* out, uint64_t n, uint64_t seed, uint64_t offset, Value value) {
  constexpr uint64_t kPerBlock = 4 / W;
  uint64_t block = offset / 4;
  uint64_t i = 0;
  for (; i + kPerBlock <= n; i += kPerBlock, ++block) {
    const PhiloxBlock b = PhiloxStreamBlock(seed, block);
    for (uint64_t e = 0; e < kPerBlock; ++e) Store<T>(out, i + e, value(&b.words[e * W]));
  }
  if (i < n) {
    const PhiloxBlock b = PhiloxStreamBlock(seed, block);
    for (uint64_t e = 0; i + e < n; ++e) Store<T>(out, i + e, value(&b.words[e * W]));
  }
}

// (out[2m], out[2m+1]) = pair(words of elements 2m and 2m+1); an odd last
// element still reads its partner's words, which the call's blocks include.
template <typename T, int W, typename Pair>
void FillPairs(void* out, uint64_t n, uint64_t seed, uint64_t offset, Pair pair) {
  constexpr uint64_t kPerBlock = 4 / W;  // 2 or 4 elements, whole pairs
  uint64_t block = offset / 4;
  for (uint64_t i = 0; i < n; i += kPerBlock, ++block) {
    const PhiloxBlock b = PhiloxStreamBlock(seed, block);
    for (uint64_t e = 0; e < kPerBlock && i + e < n; e += 2) {
      const auto [first, second] = pair(&b.words[e * W]);
      Store<T>(out, i + e, first);
      if (i + e + 1 < n) Store<T>(out, i + e + 1, second);
    }
  }
}

template <typename T>
struct Pair {
  T first;
  T second;
};

void FillUniform(void* out, const RngRequest& r, uint64_t seed, uint64_t offset) {
  const uint64_t n = r.elements;
  const float low = static_cast<float>(r.a);
  const float high = static_cast<float>(r.b);
  switch (r.dtype) {
    case RngDtype::kF32:
      return FillElements<float, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        return UniformFloatFromWord(w[0], low, high);
      });
    case RngDtype::kF64:
      return FillElements<double, 2>(out, n, seed, offset, [&r](const uint32_t* w) {
        return UniformDoubleFromWords(w[0], w[1], r.a, r.b);
      });
    case RngDtype::kF16:
      return FillElements<uint16_t, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        return UniformHalfFromWord(w[0], low, high);
      });
    case RngDtype::kBF16:
      return FillElements<uint16_t, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        return UniformBFloat16FromWord(w[0], low, high);
      });
    case RngDtype::kI32: {
      const int64_t lo = static_cast<int64_t>(r.a);
      const uint32_t range =
          static_cast<uint32_t>(static_cast<int64_t>(r.b) - lo);  // 2^32 wraps to 0
      return FillElements<int32_t, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        return UniformInt32FromWord(w[0], static_cast<int32_t>(lo), range);
      });
    }
    case RngDtype::kI64: {
      const int64_t lo = static_cast<int64_t>(r.a);
      // high may be 2^63, which int64 cannot hold; its two's-complement bits
      // still give the right wrapped range (2^64 becomes 0).
      const uint64_t high_bits =
          r.b >= kTwo63 ? uint64_t{1} << 63 : static_cast<uint64_t>(static_cast<int64_t>(r.b));
      const uint64_t range = high_bits - static_cast<uint64_t>(lo);
      return FillElements<int64_t, 2>(out, n, seed, offset, [=](const uint32_t* w) {
        return UniformInt64FromWords(w[0], w[1], lo, range);
      });
    }
    case RngDtype::kU8: {
      const uint32_t lo = static_cast<uint32_t>(r.a);
      const uint32_t range = static_cast<uint32_t>(r.b) - lo;
      return FillElements<uint8_t, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        return UniformUint8FromWord(w[0], lo, range);
      });
    }
  }
}

void FillNormal(void* out, const RngRequest& r, uint64_t seed, uint64_t offset) {
  const uint64_t n = r.elements;
  const float mean = static_cast<float>(r.a);
  const float stddev = static_cast<float>(r.b);
  switch (r.dtype) {
    case RngDtype::kF32:
      return FillPairs<float, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        const FloatPair z = NormalFloatPairFromWords(w[0], w[1], mean, stddev);
        return Pair<float>{z.first, z.second};
      });
    case RngDtype::kF64:
      return FillPairs<double, 2>(out, n, seed, offset, [&r](const uint32_t* w) {
        const DoublePair z = NormalDoublePairFromWords(w[0], w[1], w[2], w[3], r.a, r.b);
        return Pair<double>{z.first, z.second};
      });
    case RngDtype::kF16:
      return FillPairs<uint16_t, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        const FloatPair z = NormalFloatPairFromWords(w[0], w[1], mean, stddev);
        return Pair<uint16_t>{FloatToHalfBits(z.first), FloatToHalfBits(z.second)};
      });
    case RngDtype::kBF16:
      return FillPairs<uint16_t, 1>(out, n, seed, offset, [=](const uint32_t* w) {
        const FloatPair z = NormalFloatPairFromWords(w[0], w[1], mean, stddev);
        return Pair<uint16_t>{FloatToBFloat16Bits(z.first), FloatToBFloat16Bits(z.second)};
      });
    default:
      return;  // rejected by ValidateRngRequest
  }
}

void FillBits(void* out, const RngRequest& r, uint64_t seed, uint64_t offset) {
  const uint64_t n = r.elements;
  switch (RngElementSize(r.dtype)) {
    case 8:
      return FillElements<uint64_t, 2>(out, n, seed, offset, [](const uint32_t* w) {
        return static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
      });
    case 4:
      return FillElements<uint32_t, 1>(out, n, seed, offset,
                                       [](const uint32_t* w) { return w[0]; });
    case 2:
      return FillElements<uint16_t, 1>(
          out, n, seed, offset, [](const uint32_t* w) { return static_cast<uint16_t>(w[0]); });
    case 1:
      return FillElements<uint8_t, 1>(out, n, seed, offset,
                                      [](const uint32_t* w) { return static_cast<uint8_t>(w[0]); });
  }
}

}  // namespace

absl::Status ValidateRngRequest(const RngRequest& request) {
  if (RngElementSize(request.dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown RngDtype %d", static_cast<int>(request.dtype)));
  }
  if (request.elements == 0) {
    return absl::InvalidArgumentError("RngRequest.elements is 0; ask for at least 1 element");
  }
  if (request.elements > kMaxRngElements) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RngRequest.elements is %d, above the limit of 2^60 (%d); split the request",
        request.elements, kMaxRngElements));
  }
  switch (request.kind) {
    case RngKind::kBits:
      return absl::OkStatus();
    case RngKind::kUniform:
      if (!std::isfinite(request.a) || !std::isfinite(request.b)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("uniform low and high must be finite, got low=%s high=%s",
                            Num(request.a), Num(request.b)));
      }
      if (request.a >= request.b) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "uniform needs low < high, got low=%s high=%s", Num(request.a), Num(request.b)));
      }
      return IsFloatDtype(request.dtype) ? ValidateUniformFloat(request)
                                         : ValidateUniformInt(request);
    case RngKind::kNormal:
      if (!std::isfinite(request.a) || !std::isfinite(request.b)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("normal mean and std must be finite, got mean=%s std=%s",
                            Num(request.a), Num(request.b)));
      }
      return ValidateNormal(request);
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown RngKind %d", static_cast<int>(request.kind)));
}

size_t RngElementSize(RngDtype dtype) {
  switch (dtype) {
    case RngDtype::kF32:
      return 4;
    case RngDtype::kF64:
      return 8;
    case RngDtype::kF16:
      return 2;
    case RngDtype::kBF16:
      return 2;
    case RngDtype::kI32:
      return 4;
    case RngDtype::kI64:
      return 8;
    case RngDtype::kU8:
      return 1;
  }
  return 0;
}

int RngWordsPerElement(RngDtype dtype) { return RngElementSize(dtype) == 8 ? 2 : 1; }

uint64_t RngOffsetIncrement(const RngRequest& request) {
  return PhiloxOffsetIncrement(request.elements, RngWordsPerElement(request.dtype));
}

void FillRandom(void* out, const RngRequest& request, uint64_t seed, uint64_t offset) {
  switch (request.kind) {
    case RngKind::kUniform:
      return FillUniform(out, request, seed, offset);
    case RngKind::kNormal:
      return FillNormal(out, request, seed, offset);
    case RngKind::kBits:
      return FillBits(out, request, seed, offset);
  }
}

}  // namespace gpumux
