// PyTorch's allocation rules, one test each: pools and segment sizes, best
// fit, splitting in both pools, oversize blocks, coalescing and the
// inactive_split books, argument errors.

#include "allocator/caching_allocator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST_F(AllocatorTest, PicksThePoolAndSegmentSizeLikePyTorch) {
  // Largest first, so that no request fits in an earlier segment's remainder.
  AllocationResult eleven = Alloc(11 * kMiB + 1);  // >= 10 MiB: rounded up to 2 MiB
  EXPECT_EQ(eleven.segment_size, 12 * kMiB);
  EXPECT_EQ(eleven.size, 12 * kMiB);  // 1 MiB - 512 left: too little to split
  AllocationResult ten = Alloc(10 * kMiB);
  EXPECT_EQ(ten.segment_size, 10 * kMiB);
  AllocationResult mid = Alloc(kMiB + 1);  // (1, 10) MiB: 20 MiB segment
  EXPECT_EQ(mid.size, kMiB + 512);
  EXPECT_EQ(mid.segment_size, 20 * kMiB);
  AllocationResult small = Alloc(kMiB);  // <= 1 MiB: small pool, 2 MiB segment
  EXPECT_EQ(small.size, kMiB);
  EXPECT_EQ(small.segment_size, 2 * kMiB);

  const DeviceStats s = Stats();
  EXPECT_EQ(s.segment[kSmallPool].current, 1);
  EXPECT_EQ(s.segment[kLargePool].current, 3);
  EXPECT_EQ(s.reserved_bytes[kSmallPool].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.reserved_bytes[kLargePool].current, static_cast<int64_t>(42 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kSmallPool].current, static_cast<int64_t>(kMiB));
  EXPECT_EQ(s.allocated_bytes[kLargePool].current, static_cast<int64_t>(23 * kMiB + 512));
  EXPECT_EQ(s.requested_bytes[kAggregate].current,
            static_cast<int64_t>(kMiB + kMiB + 1 + 10 * kMiB + 11 * kMiB + 1));
  EXPECT_EQ(s.num_device_alloc, 4);
  const std::vector<SegmentSnapshot> segments = Segments();
  ASSERT_EQ(segments.size(), 4u);
  int small_segments = 0;
  for (const SegmentSnapshot& segment : segments) small_segments += segment.is_small ? 1 : 0;
  EXPECT_EQ(small_segments, 1);
}

TEST_F(AllocatorTest, SegmentIdsAreMonotonic) {
  AllocationResult a = Alloc(kMiB);
  AllocationResult b = Alloc(12 * kMiB);
  AllocationResult c = Alloc(kMiB);  // fits in a's segment
  EXPECT_LT(a.segment_id, b.segment_id);
  EXPECT_EQ(c.segment_id, a.segment_id);
  EXPECT_EQ(c.segment_address, a.segment_address);
  EXPECT_EQ(c.address, a.address + kMiB);
  ASSERT_NE(a.segment_handle, nullptr);
  EXPECT_FALSE(a.segment_handle->data.empty());
}

TEST_F(AllocatorTest, SmallPoolSplitsWhenAtLeast512BytesRemain) {
  AllocationResult a = Alloc(1000);  // 1024 from a fresh 2 MiB segment
  EXPECT_EQ(a.size, 1024u);
  EXPECT_EQ(a.address, a.segment_address);  // splitting keeps the front
  AllocationResult b = Alloc(kMiB);
  EXPECT_EQ(b.address, a.address + 1024);
  AllocationResult c = Alloc(kMiB - 1024 - 512);  // leaves exactly 512: still split
  EXPECT_EQ(c.size, kMiB - 1024 - 512);
  ASSERT_EQ(Segments().size(), 1u);
  EXPECT_EQ(Stats().inactive_split_bytes[kSmallPool].current, 512);
  EXPECT_EQ(Stats().inactive_split[kSmallPool].current, 1);
  AllocationResult d = Alloc(512);  // takes the last 512 bytes whole
  EXPECT_EQ(d.size, 512u);
  EXPECT_EQ(d.address, a.segment_address + 2 * kMiB - 512);
  EXPECT_EQ(Stats().inactive_split[kAggregate].current, 0);
  EXPECT_EQ(Stats().num_device_alloc, 1);
  for (const AllocationResult& r : {a, b, c, d}) Free(r);
}

TEST_F(AllocatorTest, LargePoolSplitsOnlyWhenMoreThan1MiBRemains) {
  AllocationResult a = Alloc(2 * kMiB);  // 20 MiB segment: 18 MiB stays free
  EXPECT_EQ(Stats().inactive_split_bytes[kLargePool].current, static_cast<int64_t>(18 * kMiB));
  AllocationResult b = Alloc(17 * kMiB);  // 1 MiB would remain: no split
  EXPECT_EQ(b.size, 18 * kMiB);
  EXPECT_EQ(b.requested_size, 17 * kMiB);
  EXPECT_EQ(Stats().inactive_split[kAggregate].current, 0);
  EXPECT_EQ(Stats().allocated_bytes[kLargePool].current, static_cast<int64_t>(20 * kMiB));
  Free(b);
  AllocationResult c = Alloc(17 * kMiB - 512);  // 1 MiB + 512 remains: split
  EXPECT_EQ(c.size, 17 * kMiB - 512);
  EXPECT_EQ(Stats().inactive_split_bytes[kLargePool].current, static_cast<int64_t>(kMiB + 512));
  EXPECT_EQ(Stats().num_device_alloc, 1);
  Free(a);
  Free(c);
}

TEST_F(AllocatorTest, BestFitPrefersTheSmallestThenTheLowestAddress) {
  AllocationResult x1 = Alloc(256 * kKiB);
  AllocationResult y1 = Alloc(256 * kKiB);
  AllocationResult x2 = Alloc(256 * kKiB);
  AllocationResult y2 = Alloc(256 * kKiB);
  AllocationResult x3 = Alloc(512 * kKiB);
  AllocationResult y3 = Alloc(256 * kKiB);
  Free(x2);
  Free(x3);
  Free(x1);
  // Free now, by address: x1 256K, x2 256K, x3 512K and the 256K tail (y3
  // separates x3 from it).
  AllocationResult a = Alloc(200 * kKiB);  // four candidates of 256K: lowest wins
  EXPECT_EQ(a.address, x1.address);
  AllocationResult b = Alloc(256 * kKiB);  // exact fits: x2 and the tail
  EXPECT_EQ(b.address, x2.address);
  AllocationResult c = Alloc(300 * kKiB);  // only x3 is big enough
  EXPECT_EQ(c.address, x3.address);
  for (const AllocationResult& r : {a, b, c, y1, y2, y3}) Free(r);
  EXPECT_EQ(Stats().num_device_alloc, 1);
}

TEST_F(AllocatorTest, OversizeBlocksAreNeverSplitNorGivenToSmallerRequests) {
  Init(256 * kMiB, "max_split_size_mb:20");
  EXPECT_EQ(Stats().max_split_size, static_cast<int64_t>(20 * kMiB));
  AllocationResult big = Alloc(30 * kMiB);
  EXPECT_EQ(Stats().oversize_allocations.current, 1);
  EXPECT_EQ(Stats().oversize_segments.current, 1);
  Free(big);
  EXPECT_EQ(Stats().oversize_allocations.current, 0);
  EXPECT_EQ(Stats().oversize_segments.current, 1);

  AllocationResult small = Alloc(12 * kMiB);  // < max_split: not from the 30 MiB block
  EXPECT_NE(small.segment_id, big.segment_id);
  EXPECT_EQ(Stats().num_device_alloc, 2);
  AllocationResult over = Alloc(25 * kMiB);  // oversize, within 20 MiB: takes it whole
  EXPECT_EQ(over.segment_id, big.segment_id);
  EXPECT_EQ(over.size, 30 * kMiB);
  EXPECT_EQ(Stats().inactive_split[kAggregate].current, 0);
  Free(over);
  Free(small);
}

TEST_F(AllocatorTest, OversizeRequestsTakeBlocksWithinTheNonSplitRounding) {
  Init(256 * kMiB, "max_split_size_mb:20");
  Free(Alloc(50 * kMiB));
  AllocationResult r = Alloc(22 * kMiB);  // 50 >= 22 + 20: a new segment
  EXPECT_EQ(r.segment_size, 22 * kMiB);
  Free(r);

  Init(256 * kMiB, "max_split_size_mb:20,max_non_split_rounding_mb:40");
  Free(Alloc(50 * kMiB));
  r = Alloc(22 * kMiB);  // 50 < 22 + 40: reused whole
  EXPECT_EQ(r.size, 50 * kMiB);
  EXPECT_EQ(Stats().num_device_alloc, 1);
  Free(r);
}

TEST_F(AllocatorTest, FreeCoalescesWithPrevAndNextAndKeepsInactiveSplitBooks) {
  AllocationResult a = Alloc(512 * kKiB);
  AllocationResult b = Alloc(512 * kKiB);
  AllocationResult c = Alloc(512 * kKiB);
  auto expect_split = [&](int64_t blocks, uint64_t bytes, size_t snapshot_blocks) {
    EXPECT_EQ(Stats().inactive_split[kSmallPool].current, blocks);
    EXPECT_EQ(Stats().inactive_split_bytes[kSmallPool].current, static_cast<int64_t>(bytes));
    EXPECT_EQ(StatsOf(kA).inactive_split[kSmallPool].current, blocks);
    ASSERT_EQ(Segments().size(), 1u);
    EXPECT_EQ(Segments()[0].blocks.size(), snapshot_blocks);
  };
  expect_split(1, 512 * kKiB, 4);  // the tail
  Free(b);                         // neighbours allocated: no merge
  expect_split(2, kMiB, 4);
  Free(a);  // merges with next (b)
  expect_split(2, 1536 * kKiB, 3);
  EXPECT_EQ(Segments()[0].blocks[0].address, a.address);
  EXPECT_EQ(Segments()[0].blocks[0].size, kMiB);
  Free(c);  // merges with prev (a+b) and next (tail): one unsplit block
  expect_split(0, 0, 1);
  EXPECT_EQ(Segments()[0].blocks[0].size, 2 * kMiB);
  // +1 when a split the tail, +1 when b came back; -2 when c merged both.
  EXPECT_EQ(Stats().inactive_split[kSmallPool].allocated, 2);
  EXPECT_EQ(Stats().inactive_split[kSmallPool].freed, 2);

  AllocationResult whole = Alloc(kMiB);  // front of the merged segment again
  EXPECT_EQ(whole.address, a.address);
  Free(whole);
}

TEST_F(AllocatorTest, RejectsBadSizesAndDevices) {
  using ::gpumux::testing::StatusIs;
  EXPECT_THAT(allocator_->Allocate(kDev, kA, kS0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 bytes")));
  EXPECT_THAT(allocator_->Allocate(kDev, kA, kS0, 256 * kMiB + 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("it has a total capacity of 268435456 bytes (256.00 MiB)")));
  EXPECT_THAT(allocator_->Allocate(kDev, kA, kS0, uint64_t{1} << 60),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("Tried to allocate more than 1EB memory")));
  EXPECT_THAT(allocator_->Allocate(DeviceIndex(3), kA, kS0, 512),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GPU 3 does not exist")));
  EXPECT_EQ(Stats().num_ooms, 0);
  // The whole device is a valid request.
  AllocationResult all = Alloc(256 * kMiB);
  EXPECT_EQ(all.segment_size, 256 * kMiB);
  Free(all);
}

}  // namespace
}  // namespace gpumux::testing
