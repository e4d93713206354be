// malloc's fallbacks when no cached block fits: garbage collection, releasing
// oversize blocks, releasing every cached segment and retrying, and the
// out-of-memory error; client limits.

#include <string>

#include "allocator/caching_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// PyTorch's advice, with what gpumux accepts in place of expandable_segments
// (which gpumuxd refuses).
constexpr char kTorchAdvice[] =
    " If reserved but unallocated memory is large try releasing cached memory (empty_cache, or "
    "`gpumux empty-cache`) or starting gpumuxd with --allocator-conf=max_split_size_mb:<MB> to "
    "avoid "
    "fragmentation.  See documentation "
    "for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

TEST_F(AllocatorTest, FullDeviceReleasesAnotherClientsCacheAndRetries) {
  Init(64 * kMiB);
  AllocationResult a = Alloc(40 * kMiB, kA);
  Free(a);  // cached by A
  AllocationResult b = Alloc(40 * kMiB, kB);
  EXPECT_EQ(b.size, 40 * kMiB);
  EXPECT_THAT(released_, ElementsAre(a.segment_id));
  EXPECT_EQ(Stats().num_alloc_retries, 1);
  EXPECT_EQ(StatsOf(kB).num_alloc_retries, 1);
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 0);
  EXPECT_EQ(Stats().num_sync_all_streams, 1);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).num_device_free, 1);
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(Stats().num_ooms, 0);
  Free(b);
}

TEST_F(AllocatorTest, OutOfMemoryReportsPyTorchsMessageAndTheSession) {
  Init(64 * kMiB);
  AllocationResult a = Alloc(40 * kMiB, kA);
  absl::StatusOr<AllocationResult> b = allocator_->Allocate(kDev, kB, kS0, 40 * kMiB);
  const std::string expected =
      std::string(
          "CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of "
          "64.00 MiB of which 24.00 MiB is free. Of the allocated memory 40.00 MiB is "
          "allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.") +
      kTorchAdvice + " This session has 0 bytes allocated and 0 bytes reserved on GPU 0.";
  EXPECT_THAT(b, StatusIs(absl::StatusCode::kResourceExhausted, Eq(expected)));
  EXPECT_EQ(Stats().num_ooms, 1);
  EXPECT_EQ(StatsOf(kB).num_ooms, 1);
  EXPECT_EQ(StatsOf(kA).num_ooms, 0);
  EXPECT_EQ(Stats().num_alloc_retries, 1);

  // "Tried to allocate" names the segment size, not the request.
  EXPECT_THAT(allocator_->Allocate(kDev, kB, kS0, 30 * kMiB + 1),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       StartsWith("CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has")));
  Free(a);
}

TEST_F(AllocatorTest, ClientLimitIsResourceExhaustedWithTheLimitInTheText) {
  Init(256 * kMiB);
  allocator_->SetMemoryLimit(kDev, kA, 30 * kMiB);
  EXPECT_EQ(allocator_->GetMemoryLimit(kDev, kA), 30 * kMiB);
  EXPECT_EQ(allocator_->GetMemoryLimit(kDev, kB), 0u);
  Free(Alloc(8 * kMiB, kB));  // B caches 20 MiB; it must stay cached
  AllocationResult a = Alloc(20 * kMiB, kA);
  absl::StatusOr<AllocationResult> over = allocator_->Allocate(kDev, kA, kS0, 12 * kMiB);
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted,
                             HasSubstr("is free. 30.00 MiB allowed; Of the allocated memory "
                                       "20.00 MiB is allocated by PyTorch, and 20.00 MiB is "
                                       "reserved by PyTorch but unallocated.")));
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted,
                             EndsWith(" This session has 20.00 MiB allocated and 20.00 MiB "
                                      "reserved on GPU 0 of its 30.00 MiB limit.")));
  EXPECT_EQ(StatsOf(kA).num_ooms, 1);
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 1);
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_TRUE(released_.empty());
  Free(a);
}

TEST_F(AllocatorTest, OverLimitReleasesOnlyTheClientsOwnCache) {
  allocator_->SetMemoryLimit(kDev, kA, 30 * kMiB);
  AllocationResult a_cached = Alloc(8 * kMiB, kA);
  Free(a_cached);
  Free(Alloc(8 * kMiB, kB));
  AllocationResult a = Alloc(25 * kMiB, kA);  // 20 + 26 > 30: A's cache goes
  EXPECT_EQ(a.segment_size, 26 * kMiB);
  EXPECT_THAT(released_, ElementsAre(a_cached.segment_id));
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 1);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(26 * kMiB));
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  Free(a);
}

TEST_F(AllocatorTest, ReleaseAvailableCachedBlocksFreesOversizeBlocksLargestFirst) {
  Init(100 * kMiB, "max_split_size_mb:20");
  AllocationResult fifty = Alloc(50 * kMiB);
  AllocationResult thirty = Alloc(30 * kMiB);
  Free(fifty);
  Free(thirty);
  AllocationResult r = Alloc(60 * kMiB);  // no single block: frees 50 then 30
  EXPECT_EQ(r.size, 60 * kMiB);
  EXPECT_THAT(released_, ElementsAre(fifty.segment_id, thirty.segment_id));
  EXPECT_EQ(Stats().num_alloc_retries, 0);  // never reached release_cached_blocks
  EXPECT_EQ(Stats().num_sync_all_streams, 0);
  Free(r);
}

TEST_F(AllocatorTest, ReleaseAvailableCachedBlocksFreesOneLargeEnoughBlock) {
  Init(90 * kMiB, "max_split_size_mb:20");
  AllocationResult big = Alloc(70 * kMiB);
  Free(big);
  AllocationResult r = Alloc(25 * kMiB);  // 70 >= 25 + 20: not reused; 70 + 26 > 90
  EXPECT_EQ(r.segment_size, 26 * kMiB);
  EXPECT_THAT(released_, ElementsAre(big.segment_id));
  EXPECT_EQ(Stats().num_alloc_retries, 0);
  Free(r);
}

TEST_F(AllocatorTest, GarbageCollectionFreesOldBlocksOfClientsWithALimit) {
  Init(256 * kMiB, "garbage_collection_threshold:0.5");
  allocator_->SetMemoryLimit(kDev, kA, 64 * kMiB);
  AllocationResult old_block = Alloc(12 * kMiB, kA);
  Free(old_block);
  Free(Alloc(22 * kMiB, kA));
  // 34 MiB reserved > 0.5 * 64: GC frees blocks at least as old as average
  // (the 12 MiB one) before asking the backend; no retry is needed.
  AllocationResult r = Alloc(24 * kMiB, kA);
  EXPECT_THAT(released_, ElementsAre(old_block.segment_id));
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(46 * kMiB));
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 0);
  EXPECT_EQ(StatsOf(kA).num_sync_all_streams, 0);
  Free(r);

  // Without a limit there is no GC, as PyTorch without a memory fraction.
  Free(Alloc(12 * kMiB, kB));
  Free(Alloc(22 * kMiB, kB));
  Free(Alloc(24 * kMiB, kB));
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, static_cast<int64_t>(58 * kMiB));
  EXPECT_EQ(StatsOf(kB).num_device_free, 0);
}

}  // namespace
}  // namespace gpumux::testing
