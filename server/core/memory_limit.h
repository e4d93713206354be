#pragma once

// MemoryLimit: a session's cap on one device as SetMemoryLimitRequest gives
// it (a fraction of the device's memory, a byte count, or none), and the
// bytes it comes to, which the caching allocator then enforces
// (CachingAllocator::SetMemoryLimit). Plain values and a pure function:
// thread-safe.

#include <cstdint>

#include "absl/status/statusor.h"

namespace gpumux {

// One of fraction, bytes or unlimited, like SetMemoryLimitRequest.
struct MemoryLimit {
  enum class Kind { kFraction, kBytes, kUnlimited };
  Kind kind = Kind::kUnlimited;
  double fraction = 0;
  uint64_t bytes = 0;
};

// The limit in bytes on a device of `total_memory` bytes; 0 for unlimited.
// A fraction allows fraction * total_memory, as PyTorch's
// set_per_process_memory_fraction does, and at least 1 byte (a fraction of 0
// allows nothing; 0 would read as no limit). INVALID_ARGUMENT for a fraction
// outside [0, 1] (NaN included) with PyTorch's message, or for 0 bytes.
absl::StatusOr<uint64_t> LimitInBytes(const MemoryLimit& limit, uint64_t total_memory);

}  // namespace gpumux
