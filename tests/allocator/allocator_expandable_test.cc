// expandable_segments:True and compact_segments:True: PyTorch's Note
// [Expandable Segments] (one reserved range per client, stream and pool,
// pages mapped on demand and unmapped when wholly free), its statistics and
// snapshot, and the host backend's pages behind it.

#include <cstring>
#include <vector>

#include "allocator/caching_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

constexpr char kExpandable[] = "expandable_segments:True";
constexpr char kCompact[] = "compact_segments:True";

void ExpectBooks(const AllocatorTest& t, const CachingAllocator& allocator) {
  ExpectConsistent(allocator.GetStats(kDev), allocator.Snapshot(kDev, std::nullopt), std::nullopt);
  (void)t;
}

TEST_F(AllocatorTest, ExpandableLargeRequestMapsOne20MiBPage) {
  Init(256 * kMiB, kExpandable);
  const AllocationResult a = Alloc(3 * kMiB);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.reserved_bytes[kLargePool].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(s.segment[kAggregate].current, 0);  // PyTorch counts no segment for them
  EXPECT_EQ(s.num_device_alloc, 1);
  const std::vector<SegmentSnapshot> segments = Segments();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_TRUE(segments[0].is_expandable);
  EXPECT_EQ(segments[0].address, a.address);
  EXPECT_EQ(segments[0].total_size, 20 * kMiB);
  // Expandable segments split down to 512 bytes even in the large pool.
  EXPECT_THAT(segments[0].blocks, ElementsAre(Field(&BlockSnapshot::size, 3 * kMiB),
                                              Field(&BlockSnapshot::size, 17 * kMiB)));
  EXPECT_EQ(s.inactive_split[kAggregate].current, 0);
  ExpectBooks(*this, *allocator_);
  Free(a);
  ExpectBooks(*this, *allocator_);
}

TEST_F(AllocatorTest, ExpandableSegmentGrowsInPlaceAndReportsOneRun) {
  Init(256 * kMiB, kExpandable);
  const AllocationResult a = Alloc(15 * kMiB);
  const AllocationResult b = Alloc(10 * kMiB);
  EXPECT_EQ(b.address, a.address + 15 * kMiB);  // the free tail grew by a page
  EXPECT_EQ(a.segment_id, b.segment_id);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(Stats().num_device_alloc, 2);
  const std::vector<SegmentSnapshot> segments = Segments();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].total_size, 40 * kMiB);
  ExpectBooks(*this, *allocator_);
  Free(a);
  Free(b);
}

TEST_F(AllocatorTest, EmptyCacheUnmapsOnlyWholeFreePages) {
  Init(256 * kMiB, kExpandable);
  const AllocationResult a = Alloc(15 * kMiB);  // [0, 15)
  const AllocationResult b = Alloc(10 * kMiB);  // [15, 25): pages [0, 20) and [20, 40)
  Free(a);
  allocator_->EmptyCache(kDev, std::nullopt);
  // Page 0 holds part of b: nothing is wholly free.
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(40 * kMiB));
  const AllocationResult c = Alloc(30 * kMiB);  // grows past b: [25, 55) maps [40, 60)
  EXPECT_EQ(c.address, b.address + 10 * kMiB);
  Free(c);
  allocator_->EmptyCache(kDev, std::nullopt);
  // [40, 60) was wholly free; [20, 40) still holds b's last 5 MiB.
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(Stats().num_device_free, 1);
  ExpectBooks(*this, *allocator_);
  Free(b);
  const EmptyCacheResult released = allocator_->EmptyCache(kDev, std::nullopt);
  EXPECT_EQ(released.released_bytes, 40 * kMiB);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  // Three maps (a, b, c: one page each), two unmaps (c's page, then the
  // first two pages in one call), as PyTorch counts them.
  EXPECT_EQ(Stats().num_device_alloc, 3);
  EXPECT_EQ(Stats().num_device_free, 2);
  EXPECT_TRUE(Segments().empty());
  EXPECT_EQ(released_.size(), 1u);  // the range itself went back with its last page
  ExpectBooks(*this, *allocator_);
}

TEST_F(AllocatorTest, ExpandableSmallPoolUses2MiBPages) {
  Init(256 * kMiB, kExpandable);
  const AllocationResult a = Alloc(1000);
  EXPECT_EQ(Stats().reserved_bytes[kSmallPool].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(a.size, 1024u);
  ExpectBooks(*this, *allocator_);
  Free(a);
}

TEST_F(AllocatorTest, CompactModeMapsLargePoolIn2MiBPages) {
  Init(256 * kMiB, kCompact);
  const AllocationResult a = Alloc(3 * kMiB);
  EXPECT_EQ(Stats().reserved_bytes[kLargePool].current, static_cast<int64_t>(4 * kMiB));
  ExpectBooks(*this, *allocator_);
  Free(a);
}

TEST_F(AllocatorTest, ExpandableSegmentsArePerClientAndStream) {
  Init(256 * kMiB, kExpandable);
  const AllocationResult a = Alloc(3 * kMiB, kA, kS0);
  const AllocationResult b = Alloc(3 * kMiB, kA, kS1);
  const AllocationResult c = Alloc(3 * kMiB, kB, kS0);
  EXPECT_NE(a.segment_id, b.segment_id);
  EXPECT_NE(a.segment_id, c.segment_id);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  ExpectConsistent(StatsOf(kA), Segments(kA), kA);
  ExpectConsistent(StatsOf(kB), Segments(kB), kB);
  Free(a);
  Free(b);
  Free(c);
}

TEST_F(AllocatorTest, ExpandableOutOfMemoryUnmapsTheCacheAndRetries) {
  Init(64 * kMiB, kExpandable);
  const AllocationResult a = Alloc(30 * kMiB, kA, kS0);  // maps 40 MiB
  Free(a);
  // Another stream's range needs pages the first one keeps mapped: the
  // retry unmaps them.
  const AllocationResult b = Alloc(50 * kMiB, kA, kS1);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(60 * kMiB));
  EXPECT_GE(Stats().num_alloc_retries, 1);
  absl::StatusOr<AllocationResult> too_much = allocator_->Allocate(kDev, kA, kS1, 30 * kMiB);
  ASSERT_EQ(too_much.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_much.status().message(), HasSubstr("out of memory"));
  ExpectBooks(*this, *allocator_);
  Free(b);
}

TEST_F(AllocatorTest, ExpandableSegmentsRespectTheClientsLimit) {
  Init(256 * kMiB, kCompact);
  allocator_->SetMemoryLimit(kDev, kA, 8 * kMiB);
  const AllocationResult a = Alloc(6 * kMiB);
  absl::StatusOr<AllocationResult> over = allocator_->Allocate(kDev, kA, kS0, 4 * kMiB);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LE(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(8 * kMiB));
  ExpectBooks(*this, *allocator_);
  Free(a);
}

TEST_F(AllocatorTest, GarbageCollectionUnmapsOldFreePages) {
  Init(256 * kMiB, "expandable_segments:True,garbage_collection_threshold:0.5");
  allocator_->SetMemoryLimit(kDev, kA, 64 * kMiB);
  Free(Alloc(30 * kMiB, kA, kS0));  // 40 MiB mapped, all free
  // 40 MiB reserved > 0.5 * 64: before mapping for stream 1, GC unmaps the
  // old free pages of stream 0 (no retry needed).
  const AllocationResult b = Alloc(15 * kMiB, kA, kS1);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(StatsOf(kA).num_device_free, 1);
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 0);
  ExpectBooks(*this, *allocator_);
  Free(b);
}

TEST_F(AllocatorTest, RemovedClientsExpandableSegmentsGoBack) {
  Init(256 * kMiB, kExpandable);
  Free(Alloc(3 * kMiB));
  Free(Alloc(1000));
  allocator_->RemoveClient(kA);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(released_.size(), 2u);  // both pools' ranges
  EXPECT_TRUE(Segments().empty());
  EXPECT_OK(backend_->FreeMemory(kDev));
  EXPECT_EQ(*backend_->FreeMemory(kDev), 256 * kMiB);
}

TEST_F(AllocatorTest, RemovedClientsLiveBlockKeepsItsPagesUntilFreed) {
  Init(256 * kMiB, kExpandable);
  const AllocationResult a = Alloc(3 * kMiB);
  allocator_->Recharge(kDev, a.address, kB);
  allocator_->RemoveClient(kA);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  Free(a);  // the last block of a removed client's segment: its pages go at once
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(released_.size(), 1u);
  ExpectBooks(*this, *allocator_);
}

TEST_F(AllocatorTest, ExpandablePagesHoldMemoryTheBackendCanReach) {
  Init(256 * kMiB, kCompact);
  const AllocationResult a = Alloc(3 * kMiB);
  const AllocationResult b = Alloc(3 * kMiB);  // spans the second and third pages
  absl::StatusOr<HostMemoryView> view = backend_->AccessOnHost(kDev, b.address, b.size);
  ASSERT_OK(view);
  std::memset(view->data, 0x5a, b.size);
  absl::StatusOr<HostMemoryView> again = backend_->AccessOnHost(kDev, a.address, 6 * kMiB);
  ASSERT_OK(again);
  EXPECT_EQ(again->data + 3 * kMiB, view->data);  // one contiguous mapping of the range
  EXPECT_EQ(static_cast<unsigned char>(again->data[6 * kMiB - 1]), 0x5a);
  Free(b);
  allocator_->EmptyCache(kDev, std::nullopt);  // unmaps [4, 6) MiB; a keeps [0, 4)
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(4 * kMiB));
  // Unmapped: the backend refuses work there, and the view taken before
  // reads and writes scratch, never faults.
  absl::StatusOr<HostMemoryView> gone = backend_->AccessOnHost(kDev, a.address + 4 * kMiB, kMiB);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gone.status().message(), HasSubstr("unmapped page of an expandable segment"));
  view->data[2 * kMiB] = 1;
  EXPECT_EQ(view->data[2 * kMiB], 1);
  EXPECT_EQ(static_cast<unsigned char>(view->data[0]), 0x5a);  // page [2, 4) is a's, kept
  Free(a);
}

TEST(HostBackendRangeTest, PagesAreMappedWholeAndCountedAsUsed) {
  HostBackend::Options options;
  options.device_count = 1;
  options.device_memory = 64 * kMiB;
  auto backend = HostBackend::Create(options);
  ASSERT_OK(backend);
  HostBackend& b = **backend;
  absl::StatusOr<BackendRange> range = b.ReserveRange(kDev, 128 * kMiB, 2 * kMiB, kS0, false);
  ASSERT_OK(range);
  EXPECT_EQ(*b.FreeMemory(kDev), 64 * kMiB);  // reserving costs no memory
  EXPECT_OK(b.MapPages(kDev, range->address, 4 * kMiB));
  EXPECT_EQ(*b.FreeMemory(kDev), 60 * kMiB);
  EXPECT_EQ(b.MapPages(kDev, range->address + 2 * kMiB, 2 * kMiB).code(),
            absl::StatusCode::kFailedPrecondition);  // mapped already
  EXPECT_EQ(b.MapPages(kDev, range->address + kMiB, 2 * kMiB).code(),
            absl::StatusCode::kInvalidArgument);  // not page-aligned
  EXPECT_EQ(b.MapPages(kDev, range->address + 4 * kMiB, 62 * kMiB).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*b.FreeMemory(kDev), 60 * kMiB);  // all or nothing
  EXPECT_EQ(b.UnmapPages(kDev, range->address + 4 * kMiB, 2 * kMiB).code(),
            absl::StatusCode::kFailedPrecondition);  // not mapped
  EXPECT_OK(b.UnmapPages(kDev, range->address, 2 * kMiB));
  EXPECT_EQ(*b.FreeMemory(kDev), 62 * kMiB);
  EXPECT_OK(b.ReleaseRange(kDev, range->address));  // with its last page
  EXPECT_EQ(*b.FreeMemory(kDev), 64 * kMiB);
  EXPECT_EQ(b.ReleaseRange(kDev, range->address).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b.ReserveRange(kDev, 3 * kMiB, 2 * kMiB, kS0, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpumux::testing
