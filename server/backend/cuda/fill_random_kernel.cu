#include "server/backend/cuda/fill_random_kernel.h"

#include "common/tensor/philox.h"

// One thread per Philox block: it writes the 4 / W elements that block feeds
// (W = words per element), exactly the split of common/tensor/rng_fill.cc's loops,
// so the bits match it element for element. Normal fills transform element
// pairs within a block, as FillPairs does there.

namespace gpumux {
namespace {

// Mirrors RngDtype / RngKind (common/tensor/rng_fill.h).
enum Dtype { kF32, kF64, kF16, kBF16, kI32, kI64, kU8 };
enum Kind { kUniform, kNormal, kBits };

constexpr double kTwo63 = 9223372036854775808.0;
constexpr int kThreads = 256;
constexpr unsigned kMaxGrid = 8192;  // grid-stride beyond this

template <typename T>
struct Pair {
  T first;
  T second;
};

// Stores element `index`; byte by byte where `out` is not aligned for T.
template <typename T, bool kAligned>
__device__ inline void Store(unsigned char* out, uint64_t index, T value) {
  if constexpr (kAligned) {
    reinterpret_cast<T*>(out)[index] = value;
  } else {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&value);
    for (unsigned i = 0; i < sizeof(T); ++i) out[index * sizeof(T) + i] = bytes[i];
  }
}

template <typename T, int W, bool kAligned, typename Value>
__global__ void FillElementsKernel(unsigned char* out, uint64_t n, uint64_t seed,
                                   uint64_t first_block, Value value) {
  constexpr uint64_t kPerBlock = 4 / W;
  const uint64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks;
       j += stride) {
    const PhiloxBlock b = PhiloxStreamBlock(seed, first_block + j);
    const uint64_t i = j * kPerBlock;
    for (uint64_t e = 0; e < kPerBlock && i + e < n; ++e) {
      Store<T, kAligned>(out, i + e, value(&b.words[e * W]));
    }
  }
}

template <typename T, int W, bool kAligned, typename PairFn>
__global__ void FillPairsKernel(unsigned char* out, uint64_t n, uint64_t seed, uint64_t first_block,
                                PairFn pair) {
  constexpr uint64_t kPerBlock = 4 / W;
  const uint64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks;
       j += stride) {
    const PhiloxBlock b = PhiloxStreamBlock(seed, first_block + j);
    const uint64_t i = j * kPerBlock;
    for (uint64_t e = 0; e < kPerBlock && i + e < n; e += 2) {
      const Pair<T> p = pair(&b.words[e * W]);
      Store<T, kAligned>(out, i + e, p.first);
      if (i + e + 1 < n) Store<T, kAligned>(out, i + e + 1, p.second);
    }
  }
}

// ---- Per-element transforms (the lambdas of rng_fill.cc as functors).

struct UniformF32 {
  float low, high;
  __device__ float operator()(const uint32_t* w) const {
    return UniformFloatFromWord(w[0], low, high);
  }
};
struct UniformF64 {
  double low, high;
  __device__ double operator()(const uint32_t* w) const {
    return UniformDoubleFromWords(w[0], w[1], low, high);
  }
};
struct UniformF16 {
  float low, high;
  __device__ uint16_t operator()(const uint32_t* w) const {
    return UniformHalfFromWord(w[0], low, high);
  }
};
struct UniformBF16 {
  float low, high;
  __device__ uint16_t operator()(const uint32_t* w) const {
    return UniformBFloat16FromWord(w[0], low, high);
  }
};
struct UniformI32 {
  int32_t low;
  uint32_t range;
  __device__ int32_t operator()(const uint32_t* w) const {
    return UniformInt32FromWord(w[0], low, range);
  }
};
struct UniformI64 {
  int64_t low;
  uint64_t range;
  __device__ int64_t operator()(const uint32_t* w) const {
    return UniformInt64FromWords(w[0], w[1], low, range);
  }
};
struct UniformU8 {
  uint32_t low, range;
  __device__ uint8_t operator()(const uint32_t* w) const {
    return UniformUint8FromWord(w[0], low, range);
  }
};
struct NormalF32 {
  float mean, stddev;
  __device__ Pair<float> operator()(const uint32_t* w) const {
    const FloatPair z = NormalFloatPairFromWords(w[0], w[1], mean, stddev);
    return {z.first, z.second};
  }
};
struct NormalF64 {
  double mean, stddev;
  __device__ Pair<double> operator()(const uint32_t* w) const {
    const DoublePair z = NormalDoublePairFromWords(w[0], w[1], w[2], w[3], mean, stddev);
    return {z.first, z.second};
  }
};
struct NormalF16 {
  float mean, stddev;
  __device__ Pair<uint16_t> operator()(const uint32_t* w) const {
    const FloatPair z = NormalFloatPairFromWords(w[0], w[1], mean, stddev);
    return {FloatToHalfBits(z.first), FloatToHalfBits(z.second)};
  }
};
struct NormalBF16 {
  float mean, stddev;
  __device__ Pair<uint16_t> operator()(const uint32_t* w) const {
    const FloatPair z = NormalFloatPairFromWords(w[0], w[1], mean, stddev);
    return {FloatToBFloat16Bits(z.first), FloatToBFloat16Bits(z.second)};
  }
};
struct Bits64 {
  __device__ uint64_t operator()(const uint32_t* w) const {
    return static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  }
};
struct Bits32 {
  __device__ uint32_t operator()(const uint32_t* w) const { return w[0]; }
};
struct Bits16 {
  __device__ uint16_t operator()(const uint32_t* w) const { return static_cast<uint16_t>(w[0]); }
};
struct Bits8 {
  __device__ uint8_t operator()(const uint32_t* w) const { return static_cast<uint8_t>(w[0]); }
};

unsigned GridFor(uint64_t philox_blocks) {
  const uint64_t grid = (philox_blocks + kThreads - 1) / kThreads;
  return static_cast<unsigned>(grid < kMaxGrid ? grid : kMaxGrid);
}

// Both kernels' shape: (out, elements, seed, first Philox block, transform).
template <typename Fn>
using FillKernel = void (*)(unsigned char*, uint64_t, uint64_t, uint64_t, Fn);

// Launches `aligned` where `dst` is aligned for T, else `unaligned`.
template <typename T, int W, typename Fn>
cudaError_t Launch(cudaStream_t stream, void* dst, const FillRandomLaunch& l, Fn fn,
                   FillKernel<Fn> aligned, FillKernel<Fn> unaligned) {
  const uint64_t blocks = (l.elements + (4 / W) - 1) / (4 / W);
  const FillKernel<Fn> kernel =
      reinterpret_cast<uintptr_t>(dst) % sizeof(T) == 0 ? aligned : unaligned;
  kernel<<<GridFor(blocks), kThreads, 0, stream>>>(static_cast<unsigned char*>(dst), l.elements,
                                                   l.seed, l.offset / 4, fn);
  return cudaGetLastError();
}

template <typename T, int W, typename Value>
cudaError_t Elements(cudaStream_t stream, void* dst, const FillRandomLaunch& l, Value value) {
  return Launch<T, W>(stream, dst, l, value, FillElementsKernel<T, W, true, Value>,
                      FillElementsKernel<T, W, false, Value>);
}

template <typename T, int W, typename PairFn>
cudaError_t Pairs(cudaStream_t stream, void* dst, const FillRandomLaunch& l, PairFn pair) {
  return Launch<T, W>(stream, dst, l, pair, FillPairsKernel<T, W, true, PairFn>,
                      FillPairsKernel<T, W, false, PairFn>);
}

// Parameter preparation copies rng_fill.cc's FillUniform exactly.
cudaError_t Uniform(cudaStream_t stream, void* dst, const FillRandomLaunch& l) {
  const float low = static_cast<float>(l.a);
  const float high = static_cast<float>(l.b);
  switch (l.dtype) {
    case kF32:
      return Elements<float, 1>(stream, dst, l, UniformF32{low, high});
    case kF64:
      return Elements<double, 2>(stream, dst, l, UniformF64{l.a, l.b});
    case kF16:
      return Elements<uint16_t, 1>(stream, dst, l, UniformF16{low, high});
    case kBF16:
      return Elements<uint16_t, 1>(stream, dst, l, UniformBF16{low, high});
    case kI32: {
      const int64_t lo = static_cast<int64_t>(l.a);
      const uint32_t range =
          static_cast<uint32_t>(static_cast<int64_t>(l.b) - lo);  // 2^32 wraps to 0
      return Elements<int32_t, 1>(stream, dst, l, UniformI32{static_cast<int32_t>(lo), range});
    }
    case kI64: {
      const int64_t lo = static_cast<int64_t>(l.a);
      const uint64_t high_bits =
          l.b >= kTwo63 ? uint64_t{1} << 63 : static_cast<uint64_t>(static_cast<int64_t>(l.b));
      return Elements<int64_t, 2>(stream, dst, l,
                                  UniformI64{lo, high_bits - static_cast<uint64_t>(lo)});
    }
    case kU8: {
      const uint32_t lo = static_cast<uint32_t>(l.a);
      return Elements<uint8_t, 1>(stream, dst, l, UniformU8{lo, static_cast<uint32_t>(l.b) - lo});
    }
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t Normal(cudaStream_t stream, void* dst, const FillRandomLaunch& l) {
  const float mean = static_cast<float>(l.a);
  const float stddev = static_cast<float>(l.b);
  switch (l.dtype) {
    case kF32:
      return Pairs<float, 1>(stream, dst, l, NormalF32{mean, stddev});
    case kF64:
      return Pairs<double, 2>(stream, dst, l, NormalF64{l.a, l.b});
    case kF16:
      return Pairs<uint16_t, 1>(stream, dst, l, NormalF16{mean, stddev});
    case kBF16:
      return Pairs<uint16_t, 1>(stream, dst, l, NormalBF16{mean, stddev});
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t Bits(cudaStream_t stream, void* dst, const FillRandomLaunch& l) {
  switch (l.dtype) {
    case kF64:
    case kI64:
      return Elements<uint64_t, 2>(stream, dst, l, Bits64{});
    case kF32:
    case kI32:
      return Elements<uint32_t, 1>(stream, dst, l, Bits32{});
    case kF16:
    case kBF16:
      return Elements<uint16_t, 1>(stream, dst, l, Bits16{});
    case kU8:
      return Elements<uint8_t, 1>(stream, dst, l, Bits8{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchFillRandom(cudaStream_t stream, void* dst, const FillRandomLaunch& launch) {
  if (launch.elements == 0) return cudaSuccess;
  cudaGetLastError();  // only this launch's error may come back below
  switch (launch.kind) {
    case kUniform:
      return Uniform(stream, dst, launch);
    case kNormal:
      return Normal(stream, dst, launch);
    case kBits:
      return Bits(stream, dst, launch);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace gpumux
