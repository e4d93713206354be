// CachingAllocator::Lease: whole segments the fast path's clients carve
// themselves. The segment-level books count them, the block-level ones do
// not, and the limit, the device's memory and the OOM retry apply as to any
// new segment.

#include "absl/status/status.h"
#include "allocator/caching_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

absl::StatusOr<AllocationResult> LeaseOn(CachingAllocator& allocator, uint64_t size,
                                         ClientId client = kA, bool small_pool = false) {
  return allocator.Lease(kDev, client, kS0, size, small_pool);
}

TEST_F(AllocatorTest, ALeaseCountsAsReservedSegmentAndNotAsAllocation) {
  absl::StatusOr<AllocationResult> lease = LeaseOn(*allocator_, 20 * kMiB);
  ASSERT_OK(lease);
  EXPECT_EQ(lease->address, lease->segment_address);
  EXPECT_EQ(lease->segment_size, 20 * kMiB);
  absl::StatusOr<AllocationResult> small = LeaseOn(*allocator_, 2 * kMiB, kA, /*small_pool=*/true);
  ASSERT_OK(small);
  for (const DeviceStats& s : {Stats(), StatsOf(kA)}) {
    EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<int64_t>(22 * kMiB));
    EXPECT_EQ(s.reserved_bytes[kSmallPool].current, static_cast<int64_t>(2 * kMiB));
    EXPECT_EQ(s.segment[kLargePool].current, 1);
    EXPECT_EQ(s.segment[kSmallPool].current, 1);
    EXPECT_EQ(s.num_device_alloc, 2);
    EXPECT_EQ(s.allocation[kAggregate].allocated, 0);
    EXPECT_EQ(s.allocated_bytes[kAggregate].current, 0);
    EXPECT_EQ(s.active_bytes[kAggregate].current, 0);
    EXPECT_EQ(s.requested_bytes[kAggregate].current, 0);
  }
  std::vector<SegmentSnapshot> segments = Segments(kA);
  ASSERT_EQ(segments.size(), 2u);
  for (const SegmentSnapshot& s : segments) {
    EXPECT_TRUE(s.leased);
    EXPECT_THAT(s.blocks, IsEmpty());
  }
  ExpectConsistent(Stats(), segments, std::nullopt);
  allocator_->Free(kDev, lease->address);
  allocator_->Free(kDev, small->address);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).num_device_free, 2);
  EXPECT_THAT(Segments(), IsEmpty());
  EXPECT_EQ(released_.size(), 2u);  // returned to the backend at once
}

TEST_F(AllocatorTest, LeaseSizesArePyTorchSegmentSizes) {
  for (uint64_t size : {uint64_t{0}, uint64_t{4096}, 3 * kMiB}) {
    absl::StatusOr<AllocationResult> lease = LeaseOn(*allocator_, size);
    EXPECT_EQ(lease.status().code(), absl::StatusCode::kInvalidArgument) << size;
  }
  EXPECT_THAT(LeaseOn(*allocator_, 3 * kMiB).status().message(), HasSubstr("multiple of 2 MiB"));
  EXPECT_THAT(LeaseOn(*allocator_, 512 * kMiB).status().message(), HasSubstr("total capacity"));
}

TEST_F(AllocatorTest, ALeaseHonoursTheClientsLimitWithPyTorchsMessage) {
  allocator_->SetMemoryLimit(kDev, kA, 30 * kMiB);
  ASSERT_OK(LeaseOn(*allocator_, 20 * kMiB));
  absl::StatusOr<AllocationResult> over = LeaseOn(*allocator_, 20 * kMiB);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(),
              HasSubstr("CUDA out of memory. Tried to allocate 20.00 MiB"));
  EXPECT_EQ(StatsOf(kA).num_ooms, 1);
  EXPECT_OK(LeaseOn(*allocator_, 10 * kMiB));  // what is left under the limit
}

TEST_F(AllocatorTest, AFullDeviceReleasesOtherClientsCachesForALease) {
  Init(64 * kMiB);
  Free(Alloc(40 * kMiB, kB));  // B's cache holds 40 MiB
  absl::StatusOr<AllocationResult> lease = LeaseOn(*allocator_, 40 * kMiB, kA);
  ASSERT_OK(lease);
  EXPECT_EQ(StatsOf(kB).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).num_alloc_retries, 1);
  allocator_->Free(kDev, lease->address);
}

TEST_F(AllocatorTest, ALeaseUsedByAnotherStreamReturnsAfterThatWork) {
  absl::StatusOr<AllocationResult> lease = LeaseOn(*allocator_, 2 * kMiB);
  ASSERT_OK(lease);
  auto stream = backend_->CreateStream(kDev, 0);
  ASSERT_OK(stream);
  ASSERT_OK(backend_->Memset(*stream, lease->address, 1, 2 * kMiB));
  allocator_->RecordStream(kDev, lease->address, kS1, *stream);
  allocator_->Free(kDev, lease->address);
  ASSERT_OK(backend_->SynchronizeStream(*stream));
  allocator_->EmptyCache(kDev, std::nullopt);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(Stats().active_bytes[kAggregate].current, 0);
  allocator_->RetireStream(kDev, *stream);
  ASSERT_OK(backend_->DestroyStream(*stream));
}

}  // namespace
}  // namespace gpumux::testing
