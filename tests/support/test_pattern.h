#pragma once

// Seeded pseudo-random bytes (xorshift64*, little-endian words) that tests in
// C++ and Python generate identically: never zeros, never a simple ramp.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gpumux::testing {

inline void FillPattern(void* data, size_t size, uint64_t seed) {
  uint64_t x = seed == 0 ? 0x9E3779B97F4A7C15ull : seed;
  auto* out = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < size; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    uint64_t v = x * 0x2545F4914F6CDD1Dull;
    unsigned char word[8];
    for (int b = 0; b < 8; ++b) word[b] = static_cast<unsigned char>(v >> (8 * b));
    std::memcpy(out + i, word, size - i < 8 ? size - i : 8);
  }
}

// Index of the first byte that differs from the pattern, or `size` if none.
inline size_t FirstPatternMismatch(const void* data, size_t size, uint64_t seed) {
  unsigned char chunk[4096];
  const auto* in = static_cast<const unsigned char*>(data);
  // Regenerate in step with FillPattern: whole 8-byte words per chunk.
  uint64_t x = seed == 0 ? 0x9E3779B97F4A7C15ull : seed;
  for (size_t base = 0; base < size; base += sizeof(chunk)) {
    size_t n = size - base < sizeof(chunk) ? size - base : sizeof(chunk);
    for (size_t i = 0; i < n; i += 8) {
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      uint64_t v = x * 0x2545F4914F6CDD1Dull;
      for (int b = 0; b < 8 && i + b < n; ++b)
        chunk[i + b] = static_cast<unsigned char>(v >> (8 * b));
    }
    for (size_t i = 0; i < n; ++i) {
      if (in[base + i] != chunk[i]) return base + i;
    }
  }
  return size;
}

}  // namespace gpumux::testing
