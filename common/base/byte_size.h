#pragma once

// Byte sizes as people write them ("8GiB", "512 MB", "4096") and as PyTorch
// prints them in its out-of-memory message ("20.00 MiB").

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace gpumux {

// Parses a non-negative integer or decimal with an optional unit: B, KiB, MiB,
// GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000); the unit is
// case-insensitive and may follow a space. INVALID_ARGUMENT on anything else
// or on a value above 2^64-1.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// PyTorch's format_size (c10/cuda/CUDACachingAllocator.cpp): "<n> bytes" up to
// 1024, then "%.2f KiB", "%.2f MiB" up to 1 MiB / 1 GiB, otherwise "%.2f GiB".
std::string FormatTorchSize(uint64_t bytes);

}  // namespace gpumux
