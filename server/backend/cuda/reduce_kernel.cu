#include "server/backend/cuda/reduce_kernel.h"

#include <type_traits>

#include "common/tensor/philox.h"

// One thread per element, grid-stride beyond kMaxGrid blocks. The steps are
// common/tensor/reduce.cc's: f16 and bf16 computed in f32 and rounded after every
// step, integers wrapping in their unsigned type, min and max propagating
// NaN, kAvg adding. Elements are read and written byte by byte where the
// pointers are not aligned for them.

namespace gpumux {
namespace {

// Mirror ReduceOp (common/tensor/reduce.h) and RngDtype (common/tensor/rng_fill.h).
enum Op { kSum, kProduct, kMin, kMax, kAvg };
enum Dtype { kF32, kF64, kF16, kBF16, kI32, kI64, kU8 };

constexpr int kThreads = 256;
constexpr unsigned kMaxGrid = 8192;

template <typename S, typename C>
struct Plain {
  using Storage = S;
  using Compute = C;
  __device__ static C Load(S s) { return s; }
  __device__ static S Store(C c) { return c; }
};
struct Half {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float Load(uint16_t bits) { return HalfBitsToFloat(bits); }
  __device__ static uint16_t Store(float f) { return FloatToHalfBits(f); }
};
struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float Load(uint16_t bits) { return BFloat16BitsToFloat(bits); }
  __device__ static uint16_t Store(float f) { return FloatToBFloat16Bits(f); }
};

// Wrapping integer arithmetic, in an unsigned type at least as wide as int.
template <typename T>
using Wrapping =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <int kOp, typename T>
__device__ inline T Combine(T a, T b) {
  if constexpr (kOp == kMin || kOp == kMax) {
    if constexpr (std::is_floating_point_v<T>) {
      if (isnan(a)) return a;
      if (isnan(b)) return b;
    }
    if constexpr (kOp == kMin) return b < a ? b : a;
    return a < b ? b : a;
  } else if constexpr (std::is_floating_point_v<T>) {
    if constexpr (kOp == kProduct) return a * b;
    return a + b;
  } else {
    using U = Wrapping<T>;
    if constexpr (kOp == kProduct) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  }
}

template <typename S, bool kAligned>
__device__ inline S LoadAt(const unsigned char* p, uint64_t i) {
  if constexpr (kAligned) return reinterpret_cast<const S*>(p)[i];
  S value;
  unsigned char* bytes = reinterpret_cast<unsigned char*>(&value);
  for (unsigned b = 0; b < sizeof(S); ++b) bytes[b] = p[i * sizeof(S) + b];
  return value;
}

template <typename S, bool kAligned>
__device__ inline void StoreAt(unsigned char* p, uint64_t i, S value) {
  if constexpr (kAligned) {
    reinterpret_cast<S*>(p)[i] = value;
  } else {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&value);
    for (unsigned b = 0; b < sizeof(S); ++b) p[i * sizeof(S) + b] = bytes[b];
  }
}

template <int kOp, typename D, bool kAligned>
__global__ void ReduceKernel(unsigned char* dst, const unsigned char* src, uint64_t count) {
  using S = typename D::Storage;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const S a = LoadAt<S, kAligned>(dst, i);
    const S b = LoadAt<S, kAligned>(src, i);
    StoreAt<S, kAligned>(dst, i, D::Store(Combine<kOp>(D::Load(a), D::Load(b))));
  }
}

template <typename D, bool kAligned>
__global__ void DivideKernel(unsigned char* data, uint64_t count, int ranks) {
  using S = typename D::Storage;
  using C = typename D::Compute;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const S value = LoadAt<S, kAligned>(data, i);
    S result;
    if constexpr (std::is_integral_v<C>) {  // truncating toward zero, in 64 bits
      result = static_cast<S>(static_cast<int64_t>(value) / ranks);
    } else {
      result = D::Store(D::Load(value) / static_cast<C>(ranks));
    }
    StoreAt<S, kAligned>(data, i, result);
  }
}

unsigned GridFor(uint64_t count) {
  const uint64_t blocks = (count + kThreads - 1) / kThreads;
  return blocks < kMaxGrid ? static_cast<unsigned>(blocks) : kMaxGrid;
}

template <int kOp, typename D>
cudaError_t LaunchOp(cudaStream_t stream, void* dst, const void* src, uint64_t count) {
  using S = typename D::Storage;
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % sizeof(S) == 0 &&
                       reinterpret_cast<uintptr_t>(src) % sizeof(S) == 0;
  if (aligned) {
    ReduceKernel<kOp, D, true><<<GridFor(count), kThreads, 0, stream>>>(out, in, count);
  } else {
    ReduceKernel<kOp, D, false><<<GridFor(count), kThreads, 0, stream>>>(out, in, count);
  }
  return cudaGetLastError();
}

template <typename D>
cudaError_t LaunchDtype(cudaStream_t stream, int op, void* dst, const void* src, uint64_t count) {
  switch (op) {
    case kSum:
    case kAvg:
      return LaunchOp<kSum, D>(stream, dst, src, count);
    case kProduct:
      return LaunchOp<kProduct, D>(stream, dst, src, count);
    case kMin:
      return LaunchOp<kMin, D>(stream, dst, src, count);
    case kMax:
      return LaunchOp<kMax, D>(stream, dst, src, count);
  }
  return cudaErrorInvalidValue;
}

template <typename D>
cudaError_t LaunchDivide(cudaStream_t stream, void* data, uint64_t count, int ranks) {
  using S = typename D::Storage;
  auto* bytes = static_cast<unsigned char*>(data);
  if (reinterpret_cast<uintptr_t>(data) % sizeof(S) == 0) {
    DivideKernel<D, true><<<GridFor(count), kThreads, 0, stream>>>(bytes, count, ranks);
  } else {
    DivideKernel<D, false><<<GridFor(count), kThreads, 0, stream>>>(bytes, count, ranks);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchReduce(cudaStream_t stream, int op, int dtype, void* dst, const void* src,
                         uint64_t count) {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case kF32:
      return LaunchDtype<Plain<float, float>>(stream, op, dst, src, count);
    case kF64:
      return LaunchDtype<Plain<double, double>>(stream, op, dst, src, count);
    case kF16:
      return LaunchDtype<Half>(stream, op, dst, src, count);
    case kBF16:
      return LaunchDtype<BFloat16>(stream, op, dst, src, count);
    case kI32:
      return LaunchDtype<Plain<int32_t, int32_t>>(stream, op, dst, src, count);
    case kI64:
      return LaunchDtype<Plain<int64_t, int64_t>>(stream, op, dst, src, count);
    case kU8:
      return LaunchDtype<Plain<uint8_t, uint8_t>>(stream, op, dst, src, count);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchFinishAverage(cudaStream_t stream, int dtype, void* data, uint64_t count,
                                int ranks) {
  if (count == 0 || ranks <= 1) return cudaSuccess;
  switch (dtype) {
    case kF32:
      return LaunchDivide<Plain<float, float>>(stream, data, count, ranks);
    case kF64:
      return LaunchDivide<Plain<double, double>>(stream, data, count, ranks);
    case kF16:
      return LaunchDivide<Half>(stream, data, count, ranks);
    case kBF16:
      return LaunchDivide<BFloat16>(stream, data, count, ranks);
    case kI32:
      return LaunchDivide<Plain<int32_t, int32_t>>(stream, data, count, ranks);
    case kI64:
      return LaunchDivide<Plain<int64_t, int64_t>>(stream, data, count, ranks);
    case kU8:
      return LaunchDivide<Plain<uint8_t, uint8_t>>(stream, data, count, ranks);
  }
  return cudaErrorInvalidValue;
}

}  // namespace gpumux
