#pragma once

// Host-side random fills: the request a client makes (dtype, distribution,
// element count, parameters), its validation, and a CPU implementation that
// writes exactly the bits a CUDA kernel built on common/tensor/philox.h writes for the
// same seed and offset (normal samples: to within a few ulp; see philox.h).

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace gpumux {

enum class RngDtype { kF32, kF64, kF16, kBF16, kI32, kI64, kU8 };

enum class RngKind {
  kUniform,  // [a, b) = [low, high); integers for integer dtypes (i64 bounds
             // are limited to what a double holds exactly, e.g. +-2^63).
  kNormal,   // mean a, standard deviation b; floating dtypes only.
  kBits,     // raw Philox words; a and b are ignored.
};

struct RngRequest {
  RngDtype dtype = RngDtype::kF32;
  RngKind kind = RngKind::kUniform;
  uint64_t elements = 0;
  double a = 0.0;  // low or mean
  double b = 1.0;  // high or std
};

// The most elements one request may ask for (2^60), so byte and word counts
// fit in 64 bits.
inline constexpr uint64_t kMaxRngElements = uint64_t{1} << 60;

// OK, or INVALID_ARGUMENT naming the field and what would be accepted:
// unknown dtype or kind; elements 0 or above kMaxRngElements; non-finite
// parameters; uniform low >= high (also after rounding to an f32/f16/bf16
// dtype), bounds outside the dtype's finite range or high - low overflowing
// it, non-integral integer bounds, integer bounds outside [min, max + 1] of
// the dtype; normal on an integer dtype, std < 0, mean or std beyond the
// compute type (f32 for f32/f16/bf16).
absl::Status ValidateRngRequest(const RngRequest& request);

// Bytes per element: 4, 8, 2, 2, 4, 8, 1.
size_t RngElementSize(RngDtype dtype);

// Philox words each element consumes: 2 for f64 and i64, 1 otherwise.
int RngWordsPerElement(RngDtype dtype);

// How far `request` advances the generator offset (a multiple of 4).
uint64_t RngOffsetIncrement(const RngRequest& request);

// Writes request.elements elements of request.dtype to `out` (which must hold
// elements * RngElementSize(dtype) bytes; no alignment needed) from the
// stream of (seed, offset), as philox.h defines it. `offset` is the generator
// offset before the call, a multiple of 4; the caller advances it by
// RngOffsetIncrement(request). `request` must pass ValidateRngRequest.
// Thread-safe: no shared state.
void FillRandom(void* out, const RngRequest& request, uint64_t seed, uint64_t offset);

}  // namespace gpumux
