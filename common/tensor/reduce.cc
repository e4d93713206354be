#include "common/tensor/reduce.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/tensor/philox.h"

namespace gpumux {
namespace {

// A dtype as stored (Storage) and as computed (Compute), with the two
// conversions; f16 and bf16 are stored as their bits.
template <typename S, typename C>
struct Plain {
  using Storage = S;
  using Compute = C;
  static C Load(S s) { return s; }
  static S Store(C c) { return c; }
};
struct Half {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t bits) { return HalfBitsToFloat(bits); }
  static uint16_t Store(float f) { return FloatToHalfBits(f); }
};
struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t bits) { return BFloat16BitsToFloat(bits); }
  static uint16_t Store(float f) { return FloatToBFloat16Bits(f); }
};

// Integer arithmetic that wraps: done in the unsigned type of the same width.
template <typename T>
T WrappingAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
T WrappingMultiply(T a, T b) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

template <ReduceOp kOp, typename T>
T Combine(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (kOp == ReduceOp::kMin || kOp == ReduceOp::kMax) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      if constexpr (kOp == ReduceOp::kMin) return b < a ? b : a;
      return a < b ? b : a;
    } else if constexpr (kOp == ReduceOp::kProduct) {
      return a * b;
    } else {
      return a + b;
    }
  } else {
    if constexpr (kOp == ReduceOp::kMin) return b < a ? b : a;
    if constexpr (kOp == ReduceOp::kMax) return a < b ? b : a;
    if constexpr (kOp == ReduceOp::kProduct) return WrappingMultiply(a, b);
    return WrappingAdd(a, b);
  }
}

template <ReduceOp kOp, typename D>
void AccumulateAs(void* dst, const void* src, uint64_t count) {
  using S = typename D::Storage;
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  for (uint64_t i = 0; i < count; ++i) {
    S a;
    S b;
    std::memcpy(&a, out + i * sizeof(S), sizeof(S));
    std::memcpy(&b, in + i * sizeof(S), sizeof(S));
    const S result = D::Store(Combine<kOp>(D::Load(a), D::Load(b)));
    std::memcpy(out + i * sizeof(S), &result, sizeof(S));
  }
}

template <typename D>
void AccumulateDtype(ReduceOp op, void* dst, const void* src, uint64_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return AccumulateAs<ReduceOp::kSum, D>(dst, src, count);
    case ReduceOp::kProduct:
      return AccumulateAs<ReduceOp::kProduct, D>(dst, src, count);
    case ReduceOp::kMin:
      return AccumulateAs<ReduceOp::kMin, D>(dst, src, count);
    case ReduceOp::kMax:
      return AccumulateAs<ReduceOp::kMax, D>(dst, src, count);
  }
}

template <typename D>
void DivideAs(void* data, uint64_t count, int ranks) {
  using S = typename D::Storage;
  using C = typename D::Compute;
  auto* bytes = static_cast<unsigned char*>(data);
  for (uint64_t i = 0; i < count; ++i) {
    S value;
    std::memcpy(&value, bytes + i * sizeof(S), sizeof(S));
    S result;
    if constexpr (std::is_integral_v<C>) {
      // Truncates toward zero; in 64 bits, so that uint8 takes any rank count.
      result = static_cast<S>(static_cast<int64_t>(value) / ranks);
    } else {
      result = D::Store(D::Load(value) / static_cast<C>(ranks));
    }
    std::memcpy(bytes + i * sizeof(S), &result, sizeof(S));
  }
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "unknown";
}

void Accumulate(ReduceOp op, RngDtype dtype, void* dst, const void* src, uint64_t count) {
  switch (dtype) {
    case RngDtype::kF32:
      return AccumulateDtype<Plain<float, float>>(op, dst, src, count);
    case RngDtype::kF64:
      return AccumulateDtype<Plain<double, double>>(op, dst, src, count);
    case RngDtype::kF16:
      return AccumulateDtype<Half>(op, dst, src, count);
    case RngDtype::kBF16:
      return AccumulateDtype<BFloat16>(op, dst, src, count);
    case RngDtype::kI32:
      return AccumulateDtype<Plain<int32_t, int32_t>>(op, dst, src, count);
    case RngDtype::kI64:
      return AccumulateDtype<Plain<int64_t, int64_t>>(op, dst, src, count);
    case RngDtype::kU8:
      return AccumulateDtype<Plain<uint8_t, uint8_t>>(op, dst, src, count);
  }
}

void FinishAverage(RngDtype dtype, void* data, uint64_t count, int ranks) {
  if (ranks <= 1) return;
  switch (dtype) {
    case RngDtype::kF32:
      return DivideAs<Plain<float, float>>(data, count, ranks);
    case RngDtype::kF64:
      return DivideAs<Plain<double, double>>(data, count, ranks);
    case RngDtype::kF16:
      return DivideAs<Half>(data, count, ranks);
    case RngDtype::kBF16:
      return DivideAs<BFloat16>(data, count, ranks);
    case RngDtype::kI32:
      return DivideAs<Plain<int32_t, int32_t>>(data, count, ranks);
    case RngDtype::kI64:
      return DivideAs<Plain<int64_t, int64_t>>(data, count, ranks);
    case RngDtype::kU8:
      return DivideAs<Plain<uint8_t, uint8_t>>(data, count, ranks);
  }
}

}  // namespace gpumux
