// What gpumux adds to PyTorch's allocator: per-client and per-stream reuse,
// dedicated segments, empty_cache per client, Recharge and RemoveClient.

#include "allocator/caching_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST_F(AllocatorTest, BlocksFreedOnOneStreamAreNotHandedToAnother) {
  AllocationResult on_s0 = Alloc(kMiB, kA, kS0);
  Free(on_s0);
  AllocationResult on_s1 = Alloc(kMiB, kA, kS1);
  EXPECT_NE(on_s1.segment_id, on_s0.segment_id);
  EXPECT_EQ(Stats().num_device_alloc, 2);
  AllocationResult again = Alloc(kMiB, kA, kS0);  // back on stream 0: reused
  EXPECT_EQ(again.address, on_s0.address);
  EXPECT_EQ(Stats().num_device_alloc, 2);
  EXPECT_EQ(Segments()[0].stream, kS0);
  Free(on_s1);
  Free(again);
}

TEST_F(AllocatorTest, ClientsNeverReceiveAnotherClientsBlock) {
  AllocationResult x = Alloc(12 * kMiB, kA);
  Free(x);
  AllocationResult y = Alloc(12 * kMiB, kB);
  EXPECT_NE(y.segment_id, x.segment_id);
  EXPECT_EQ(Stats().num_device_alloc, 2);
  ASSERT_EQ(Segments(kA).size(), 1u);
  EXPECT_EQ(Segments(kA)[0].client, kA);
  ASSERT_EQ(Segments(kB).size(), 1u);
  EXPECT_EQ(Segments(kB)[0].id, y.segment_id);
  EXPECT_EQ(StatsOf(kB).allocated_bytes[kAggregate].current, static_cast<int64_t>(12 * kMiB));
  EXPECT_EQ(StatsOf(kA).allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(12 * kMiB));
  Free(y);
}

TEST_F(AllocatorTest, DedicatedAllocationsOwnTheirSegmentAndReleaseItOnFree) {
  Free(Alloc(kMiB));  // a cached small segment a dedicated request must not use
  AllocationResult tiny = Alloc(1000, kA, kS0, /*dedicated=*/true);
  EXPECT_EQ(tiny.size, 2 * kMiB);
  EXPECT_EQ(tiny.segment_size, 2 * kMiB);
  EXPECT_EQ(tiny.address, tiny.segment_address);
  AllocationResult big = Alloc(3 * kMiB, kA, kS0, /*dedicated=*/true);
  EXPECT_EQ(big.size, 4 * kMiB);  // rounded to 2 MiB, not to a 20 MiB segment
  EXPECT_EQ(Stats().num_device_alloc, 3);
  EXPECT_EQ(Stats().allocated_bytes[kSmallPool].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(Stats().allocated_bytes[kLargePool].current, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(Stats().requested_bytes[kAggregate].current, static_cast<int64_t>(1000 + 3 * kMiB));
  int dedicated = 0;
  for (const SegmentSnapshot& s : Segments()) dedicated += s.dedicated ? 1 : 0;
  EXPECT_EQ(dedicated, 2);

  Free(big);
  EXPECT_THAT(released_, ElementsAre(big.segment_id));
  EXPECT_EQ(Stats().reserved_bytes[kLargePool].current, 0);
  Free(tiny);
  EXPECT_THAT(released_, ElementsAre(big.segment_id, tiny.segment_id));
  EXPECT_EQ(Stats().num_device_free, 2);
  EXPECT_EQ(Stats().inactive_split[kAggregate].current, 0);
  ExpectConsistent(Stats(), Segments(), std::nullopt);
}

TEST_F(AllocatorTest, EmptyCacheReleasesUnsplitCachedSegmentsOfOneOrAllClients) {
  AllocationResult live = Alloc(12 * kMiB, kA);
  AllocationResult split_live = Alloc(512 * kKiB, kA);  // keeps its 2 MiB segment split
  AllocationResult s = Alloc(12 * kMiB, kA);
  AllocationResult l = Alloc(8 * kMiB, kA);
  Free(s);
  Free(l);
  Free(Alloc(8 * kMiB, kB));

  EmptyCacheResult a = allocator_->EmptyCache(kDev, kA);
  EXPECT_EQ(a.released_segments, 2u);
  EXPECT_EQ(a.released_bytes, 32 * kMiB);
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(StatsOf(kA).num_sync_all_streams, 1);

  EmptyCacheResult all = allocator_->EmptyCache(std::nullopt, std::nullopt);
  EXPECT_EQ(all.released_segments, 1u);
  EXPECT_EQ(all.released_bytes, 20 * kMiB);
  EXPECT_EQ(Stats().num_sync_all_streams, 2);
  EXPECT_EQ(released_.size(), 3u);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(14 * kMiB));
  Free(live);
  Free(split_live);
}

TEST_F(AllocatorTest, RechargeMovesADedicatedBlockWithItsSegment) {
  AllocationResult r = Alloc(3 * kMiB, kA, kS0, /*dedicated=*/true);
  const DeviceStats before = Stats();
  allocator_->Recharge(kDev, r.address, kB);
  EXPECT_EQ(StatsOf(kA).allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).segment[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kB).allocation[kAggregate].current, 1);
  EXPECT_EQ(StatsOf(kB).allocated_bytes[kLargePool].current, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kLargePool].current, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(StatsOf(kB).requested_bytes[kAggregate].current, static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(Stats().allocated_bytes[kAggregate].current,
            before.allocated_bytes[kAggregate].current);
  ASSERT_EQ(Segments(kB).size(), 1u);
  EXPECT_EQ(Segments(kB)[0].blocks[0].client, kB);
  for (ClientId c : {kA, kB}) ExpectConsistent(StatsOf(c), Segments(), c);

  allocator_->RemoveClient(kA);  // the owner leaves; B keeps the block
  Free(r);
  EXPECT_THAT(released_, ElementsAre(r.segment_id));
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kB).num_device_free, 1);
}

TEST_F(AllocatorTest, RechargeOfASharedSegmentBlockMovesOnlyTheBlock) {
  AllocationResult a1 = Alloc(kMiB, kA);
  AllocationResult a2 = Alloc(512 * kKiB, kA);
  allocator_->Recharge(kDev, a1.address, kB);
  EXPECT_EQ(StatsOf(kA).allocation[kAggregate].current, 1);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(StatsOf(kB).allocated_bytes[kSmallPool].current, static_cast<int64_t>(kMiB));
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, 0);
  for (ClientId c : {kA, kB}) ExpectConsistent(StatsOf(c), Segments(), c);

  Free(a1);  // back to A's cache, off B's books
  EXPECT_EQ(StatsOf(kB).active_bytes[kAggregate].current, 0);
  for (ClientId c : {kA, kB}) ExpectConsistent(StatsOf(c), Segments(), c);
  AllocationResult b = Alloc(kMiB, kB);
  EXPECT_NE(b.segment_id, a1.segment_id);
  AllocationResult a3 = Alloc(kMiB, kA);
  EXPECT_EQ(a3.address, a1.address);
  for (const AllocationResult& r : {a2, b, a3}) Free(r);
  ExpectConsistent(Stats(), Segments(), std::nullopt);
}

TEST_F(AllocatorTest, RemoveClientReleasesItsCacheAndForgetsIt) {
  allocator_->SetMemoryLimit(kDev, kA, 100 * kMiB);
  AllocationResult x = Alloc(kMiB, kA);
  AllocationResult y = Alloc(12 * kMiB, kA);
  Free(x);
  Free(y);
  Free(Alloc(kMiB, kB));
  allocator_->RemoveClient(kA);
  EXPECT_THAT(released_, ElementsAre(y.segment_id, x.segment_id));  // large pool first
  EXPECT_EQ(allocator_->GetMemoryLimit(kDev, kA), 0u);
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);  // a fresh, never-seen client
  EXPECT_EQ(StatsOf(kB).segment[kAggregate].current, 1);
  EXPECT_THAT(Segments(kA), IsEmpty());
}

TEST_F(AllocatorTest, RemovedClientsSegmentGoesWhenTheRechargedBlockIsFreed) {
  AllocationResult a1 = Alloc(kMiB, kA);
  AllocationResult a2 = Alloc(512 * kKiB, kA);
  allocator_->Recharge(kDev, a1.address, kB);
  Free(a2);
  allocator_->RemoveClient(kA);
  ASSERT_EQ(Segments().size(), 1u);  // still holds B's block
  EXPECT_TRUE(released_.empty());
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(2 * kMiB));
  Free(a1);
  EXPECT_THAT(released_, ElementsAre(a1.segment_id));
  EXPECT_THAT(Segments(), IsEmpty());
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);  // forgotten
  EXPECT_EQ(StatsOf(kB).allocation[kAggregate].current, 0);
  ExpectConsistent(Stats(), Segments(), std::nullopt);
}

}  // namespace
}  // namespace gpumux::testing
