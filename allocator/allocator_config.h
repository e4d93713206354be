#pragma once

// PyTorch's caching-allocator constants and options (PYTORCH_CUDA_ALLOC_CONF):
// the values of c10/cuda/CUDACachingAllocator.cpp and the option grammar of
// c10/core/AllocatorConfig.cpp, with PyTorch's error texts.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace gpumux {

inline constexpr uint64_t kMinBlockSize = 512;                 // all sizes round up to this
inline constexpr uint64_t kSmallSize = 1048576;                // largest small-pool request
inline constexpr uint64_t kSmallBuffer = 2097152;              // small-pool segment size
inline constexpr uint64_t kMinLargeAlloc = 10485760;           // below: 20 MiB segments
inline constexpr uint64_t kLargeBuffer = 20971520;             // mid-size segment size
inline constexpr uint64_t kRoundLarge = 2097152;               // large segments round to this
inline constexpr uint64_t kMaxAllocation = uint64_t{1} << 60;  // "more than 1EB"
inline constexpr int kRoundupPowerOfTwoIntervals = 16;         // 1 MiB .. 64 GiB buckets
// Expandable segments' page sizes: PyTorch maps 2 MiB pages in the small
// pool and 20 MiB pages in the large one; compact mode maps 2 MiB pages in
// both (CUDA's granularity).
inline constexpr uint64_t kSmallPage = kSmallBuffer;
inline constexpr uint64_t kLargePage = kLargeBuffer;

struct AllocatorOptions {
  // Blocks at least this big are never split ("oversize"). SIZE_MAX: no limit.
  uint64_t max_split_size = SIZE_MAX;
  // An oversize request may take a cached block at most this much bigger.
  uint64_t max_non_split_rounding_size = kLargeBuffer;
  // In (0, 1); 0 disables. Only acts for clients with a memory limit.
  double garbage_collection_threshold = 0;
  // Divisions per power-of-two bucket (bucket i covers [2^i MiB, 2^(i+1) MiB));
  // 0 disables rounding for the bucket.
  std::array<uint64_t, kRoundupPowerOfTwoIntervals> roundup_power2_divisions{};
  // PyTorch's expandable_segments: per (client, stream, pool) one reserved
  // address range whose pages are mapped on demand and unmapped when wholly
  // free (device_allocator_expandable.cc).
  bool expandable_segments = false;
  // gpumux's compact mode (implies expandable_segments): 2 MiB pages in both
  // pools, and wholly free pages elsewhere in the range are unmapped before
  // new ones are mapped, so reserved bytes follow allocated bytes.
  bool compact_segments = false;
  // The text this was parsed from.
  std::string conf;

  // Parses PYTORCH_CUDA_ALLOC_CONF syntax: "max_split_size_mb:64,
  // garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,>:8],
  // max_non_split_rounding_mb:40,expandable_segments:True", and gpumux's
  // compact_segments:True. INVALID_ARGUMENT with PyTorch's message for
  // unknown keys and bad values.
  static absl::StatusOr<AllocatorOptions> Parse(absl::string_view conf);
};

// PyTorch's round_size: 512-byte rounding, or power-of-two divisions when
// configured for the size's bucket.
uint64_t RoundSize(uint64_t size, const AllocatorOptions& options);

// PyTorch's roundup_power2_next_division: `size` rounded up to the next of
// `divisions` equal steps between its neighbouring powers of two
// (1200 with 4 divisions -> 1280). Powers of two are returned unchanged.
uint64_t RoundUpPower2NextDivision(uint64_t size, uint64_t divisions);

// PyTorch's get_allocation_size: the segment size to obtain for a rounded
// request: 2 MiB up to 1 MiB, 20 MiB below 10 MiB, else a multiple of 2 MiB.
uint64_t SegmentSizeFor(uint64_t rounded_size);

}  // namespace gpumux
