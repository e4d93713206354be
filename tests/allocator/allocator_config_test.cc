#include "allocator/allocator_config.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::Eq;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

AllocatorOptions Parsed(const std::string& conf) {
  absl::StatusOr<AllocatorOptions> options = AllocatorOptions::Parse(conf);
  EXPECT_OK(options);
  return options.ok() ? *options : AllocatorOptions{};
}

TEST(RoundSizeTest, RoundsUpToMultiplesOf512) {
  const AllocatorOptions defaults;
  EXPECT_EQ(RoundSize(1, defaults), 512u);
  EXPECT_EQ(RoundSize(511, defaults), 512u);
  EXPECT_EQ(RoundSize(512, defaults), 512u);
  EXPECT_EQ(RoundSize(513, defaults), 1024u);
  EXPECT_EQ(RoundSize(1200, defaults), 1536u);
  EXPECT_EQ(RoundSize(kMiB, defaults), kMiB);
  EXPECT_EQ(RoundSize(kMiB + 1, defaults), kMiB + 512);
  EXPECT_EQ(RoundSize(5518937512, defaults), 5518937600u);
}

TEST(RoundSizeTest, NextDivisionMatchesPyTorchExample) {
  // "1200 with 4 divisions lies in 1024..2048: 1024/1280/1536/1792 -> 1280".
  EXPECT_EQ(RoundUpPower2NextDivision(1200, 4), 1280u);
  EXPECT_EQ(RoundUpPower2NextDivision(1024, 4), 1024u);  // powers of two stay
  EXPECT_EQ(RoundUpPower2NextDivision(1280, 4), 1280u);  // already on a step
  EXPECT_EQ(RoundUpPower2NextDivision(1281, 4), 1536u);
  EXPECT_EQ(RoundUpPower2NextDivision(1200, 1), 1200u);     // < 2 divisions: unchanged
  EXPECT_EQ(RoundUpPower2NextDivision(1025, 4096), 2048u);  // step 0: next power of two
}

TEST(RoundSizeTest, UsesDivisionsOnlyAbove512TimesDivisions) {
  const AllocatorOptions four = Parsed("roundup_power2_divisions:4");
  EXPECT_EQ(RoundSize(1200, four), 1536u);  // 1200 <= 512 * 4: plain rounding
  EXPECT_EQ(RoundSize(1200 * kKiB, four), 1280 * kKiB);
  EXPECT_EQ(RoundSize(3 * kMiB + 1, four), 3 * kMiB + 512 * kKiB);
  EXPECT_EQ(RoundSize(4 * kMiB, four), 4 * kMiB);
}

TEST(RoundSizeTest, DivisionListFollowsTheCodeNotTheDocs) {
  const AllocatorOptions options = Parsed("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  // The first key fills every bucket below it; ">" starts at the last key's
  // bucket inclusive, overwriting 1024's 4 with 8.
  EXPECT_EQ(options.roundup_power2_divisions[0], 1u);
  EXPECT_EQ(options.roundup_power2_divisions[7], 1u);
  EXPECT_EQ(options.roundup_power2_divisions[8], 1u);
  EXPECT_EQ(options.roundup_power2_divisions[9], 2u);
  EXPECT_EQ(options.roundup_power2_divisions[10], 8u);
  EXPECT_EQ(options.roundup_power2_divisions[15], 8u);
  // Bucket 9 covers [512 MiB, 1 GiB): two divisions of 512 MiB each.
  EXPECT_EQ(RoundSize(600 * kMiB, options), 768 * kMiB);
}

TEST(SegmentSizeForTest, FollowsGetAllocationSize) {
  EXPECT_EQ(SegmentSizeFor(512), 2 * kMiB);
  EXPECT_EQ(SegmentSizeFor(kMiB), 2 * kMiB);
  EXPECT_EQ(SegmentSizeFor(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(SegmentSizeFor(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(SegmentSizeFor(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(SegmentSizeFor(11 * kMiB + 512), 12 * kMiB);
}

TEST(AllocatorOptionsTest, DefaultsMatchPyTorch) {
  const AllocatorOptions options = Parsed("");
  EXPECT_EQ(options.max_split_size, SIZE_MAX);
  EXPECT_EQ(options.max_non_split_rounding_size, 20 * kMiB);
  EXPECT_EQ(options.garbage_collection_threshold, 0);
  for (uint64_t d : options.roundup_power2_divisions) EXPECT_EQ(d, 0u);
}

TEST(AllocatorOptionsTest, ParsesEveryOption) {
  const std::string conf =
      "max_split_size_mb:64, garbage_collection_threshold:0.6,"
      "roundup_power2_divisions:[256:1,>:8],max_non_split_rounding_mb:40,"
      "expandable_segments:False";
  const AllocatorOptions options = Parsed(conf);
  EXPECT_EQ(options.max_split_size, 64 * kMiB);
  EXPECT_EQ(options.max_non_split_rounding_size, 40 * kMiB);
  EXPECT_DOUBLE_EQ(options.garbage_collection_threshold, 0.6);
  EXPECT_EQ(options.roundup_power2_divisions[7], 1u);
  EXPECT_EQ(options.roundup_power2_divisions[8], 8u);
  EXPECT_EQ(options.conf, conf);
}

TEST(AllocatorOptionsTest, MaxSplitSizeBelow20IsRejected) {
  EXPECT_THAT(AllocatorOptions::Parse("max_split_size_mb:19"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("CachingAllocator option max_split_size_mb too small, must be >= 20")));
  EXPECT_EQ(Parsed("max_split_size_mb:20").max_split_size, 20 * kMiB);
  EXPECT_THAT(
      AllocatorOptions::Parse("max_non_split_rounding_mb:10"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               Eq("CachingAllocator option max_non_split_rounding_mb too small, must be >= 20")));
}

TEST(AllocatorOptionsTest, GarbageCollectionThresholdMustBeInsideZeroOne) {
  for (const char* value : {"0", "1.0", "1.5", "-0.2"}) {
    EXPECT_THAT(AllocatorOptions::Parse(std::string("garbage_collection_threshold:") + value),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         Eq("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")))
        << value;
  }
}

TEST(AllocatorOptionsTest, RoundupDivisionsErrorsUsePyTorchText) {
  EXPECT_THAT(AllocatorOptions::Parse("roundup_power2_divisions:3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("For roundups, the divisons has to be power of 2 ")));
  EXPECT_THAT(
      AllocatorOptions::Parse("roundup_power2_divisions:[256:3]"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               Eq("For roundups, the divisons has to be power of 2 or 0 to disable roundup ")));
  EXPECT_THAT(AllocatorOptions::Parse("roundup_power2_divisions:[300:2]"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("For roundups, the intervals have to be power of 2 ")));
  EXPECT_THAT(AllocatorOptions::Parse("roundup_power2_divisions:[256:2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Error parsing CachingAllocator::AllocatorConfig settings, expected ]")));
  EXPECT_EQ(Parsed("roundup_power2_divisions:[256:0]").roundup_power2_divisions[8], 0u);
}

TEST(AllocatorOptionsTest, ExpandableAndCompactSegmentsTakeTrueOrFalse) {
  EXPECT_FALSE(Parsed("").expandable_segments);
  EXPECT_FALSE(Parsed("expandable_segments:False").expandable_segments);
  EXPECT_TRUE(Parsed("expandable_segments:True").expandable_segments);
  EXPECT_FALSE(Parsed("expandable_segments:True").compact_segments);
  // Compact mode is expandable segments with gpumux's page policy.
  const AllocatorOptions compact = Parsed("compact_segments:True");
  EXPECT_TRUE(compact.compact_segments);
  EXPECT_TRUE(compact.expandable_segments);
  EXPECT_THAT(AllocatorOptions::Parse("expandable_segments:yes"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Expected a single True/False argument for expandable_segments")));
  EXPECT_THAT(AllocatorOptions::Parse("compact_segments:1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Expected a single True/False argument for compact_segments")));
}

TEST(AllocatorOptionsTest, UnknownKeysAndBadSyntaxAreRejected) {
  EXPECT_THAT(AllocatorOptions::Parse("max_split_size_mb:64,backend_x:1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Unrecognized CachingAllocator option: backend_x")));
  EXPECT_THAT(AllocatorOptions::Parse("max_split_size_mb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Error parsing CachingAllocator::AllocatorConfig settings, expected :")));
  EXPECT_THAT(AllocatorOptions::Parse("max_split_size_mb:64:1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("Error parsing CachingAllocator::AllocatorConfig settings, expected ,")));
  EXPECT_THAT(AllocatorOptions::Parse("max_split_size_mb:lots"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("CachingAllocator option max_split_size_mb has invalid value 'lots'")));
  EXPECT_THAT(
      AllocatorOptions::Parse("max_split_size_mb:"),
      StatusIs(absl::StatusCode::kInvalidArgument, Eq("Error, expecting max_split_size_mb value")));
}

}  // namespace
}  // namespace gpumux
