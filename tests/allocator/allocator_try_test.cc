// TryAllocateCached and TryFree, the allocator's calls for a caller that
// must not wait (Python's, holding its interpreter lock): they serve exactly
// what Allocate and Free would, with the same books, when the cache serves
// the request without a backend call; otherwise they step aside with nothing
// changed, and they never wait for a thread that holds the device's lock.

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "allocator/caching_allocator.h"
#include "gtest/gtest.h"
#include "server/backend/forwarding_backend.h"
#include "server/backend/host/host_backend.h"
#include "tests/allocator/allocator_test_util.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {
namespace {

// Counts every call the allocator makes to its backend; a segment request
// can be held until the test lets it go.
class CountingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex device, uint64_t size) override {
    ++calls;
    if (hold_segments) {
      entered.Notify();
      release.WaitForNotification();
    }
    return ForwardingBackend::AllocateSegment(device, size);
  }
  absl::Status ReleaseSegment(DeviceIndex device, uint64_t address) override {
    ++calls;
    return ForwardingBackend::ReleaseSegment(device, address);
  }
  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override {
    ++calls;
    return ForwardingBackend::CreateEvent(device, flags);
  }
  absl::Status DestroyEvent(BackendEvent event) override {
    ++calls;
    return ForwardingBackend::DestroyEvent(event);
  }
  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override {
    ++calls;
    return ForwardingBackend::RecordEvent(event, stream);
  }
  absl::StatusOr<bool> QueryEvent(BackendEvent event) override {
    ++calls;
    return ForwardingBackend::QueryEvent(event);
  }
  absl::Status SynchronizeEvent(BackendEvent event) override {
    ++calls;
    return ForwardingBackend::SynchronizeEvent(event);
  }

  std::atomic<int> calls{0};
  std::atomic<bool> hold_segments{false};
  absl::Notification entered, release;
};

// Two allocators over backends of their own: `plain_` only ever gets
// Allocate and Free; `trying_` gets TryAllocateCached and TryFree first.
class AllocatorTryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      HostBackend::Options options;
      options.device_count = 1;
      options.device_memory = 512 * kMiB;
      absl::StatusOr<std::unique_ptr<HostBackend>> host = HostBackend::Create(options);
      ASSERT_OK(host);
      hosts_[i] = std::move(*host);
      counting_[i] = std::make_unique<CountingBackend>(hosts_[i].get());
      allocators_[i] = std::make_unique<CachingAllocator>(counting_[i].get(), AllocatorOptions{},
                                                          [](DeviceIndex, SegmentId) {});
    }
  }
  void TearDown() override {
    for (auto& allocator : allocators_) allocator.reset();
  }
  CachingAllocator& plain() { return *allocators_[0]; }
  CachingAllocator& trying() { return *allocators_[1]; }
  CountingBackend& backend() { return *counting_[1]; }

  static std::vector<int64_t> Values(const DeviceStats& stats) {
    std::vector<int64_t> values(sizeof(DeviceStats) / sizeof(int64_t));
    std::memcpy(values.data(), &stats, sizeof(DeviceStats));
    return values;
  }

  std::unique_ptr<HostBackend> hosts_[2];
  std::unique_ptr<CountingBackend> counting_[2];
  std::unique_ptr<CachingAllocator> allocators_[2];
};

TEST_F(AllocatorTryTest, ServesWhatAllocateWouldWithTheSameBooks) {
  std::mt19937_64 random(20261203);
  struct Live {
    AllocationResult plain, trying;
  };
  std::vector<Live> live;
  int served = 0, frees = 0, freed = 0;
  for (int op = 0; op < 4000; ++op) {
    SCOPED_TRACE(op);
    const bool allocate = live.empty() || (live.size() < 200 && random() % 2 == 0);
    if (allocate) {
      // Small and large sizes, a few streams, two clients.
      const uint64_t size = random() % 4 == 0 ? 1 + random() % (24 * kMiB) : 1 + random() % 200000;
      const ClientId client(1 + random() % 2);
      const StreamId stream(random() % 3);
      absl::StatusOr<AllocationResult> expected = plain().Allocate(kDev, client, stream, size);
      ASSERT_OK(expected);
      const int calls = backend().calls;
      std::optional<AllocationResult> got = trying().TryAllocateCached(kDev, client, stream, size);
      if (got.has_value()) {
        ++served;
        EXPECT_EQ(backend().calls, calls) << "the try path called the backend";
      } else {
        absl::StatusOr<AllocationResult> allocated = trying().Allocate(kDev, client, stream, size);
        ASSERT_OK(allocated);
        got = *allocated;
      }
      EXPECT_EQ(got->size, expected->size);
      EXPECT_EQ(got->requested_size, expected->requested_size);
      EXPECT_EQ(got->address - got->segment_address, expected->address - expected->segment_address);
      live.push_back({*expected, *got});
    } else {
      const size_t victim = random() % live.size();
      ++frees;
      plain().Free(kDev, live[victim].plain.address);
      const int calls = backend().calls;
      if (trying().TryFree(kDev, live[victim].trying.address)) {
        ++freed;
        EXPECT_EQ(backend().calls, calls) << "the try path called the backend";
      } else {
        trying().Free(kDev, live[victim].trying.address);
      }
      live[victim] = live.back();
      live.pop_back();
    }
    ASSERT_EQ(Values(trying().GetStats(kDev)), Values(plain().GetStats(kDev)));
    ASSERT_EQ(Values(trying().GetClientStats(kDev, kA)), Values(plain().GetClientStats(kDev, kA)));
  }
  // Most requests after the first few hit the cache, and every free of a
  // block nobody else used is immediate.
  EXPECT_GT(served, 1000);
  EXPECT_GT(frees, 1000);
  EXPECT_EQ(freed, frees);
}

TEST_F(AllocatorTryTest, StepsAsideWithoutACachedBlockOrForABadRequest) {
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kA, kS0, 4096).has_value());  // empty cache
  const AllocationResult first = *trying().Allocate(kDev, kA, kS0, 4096);
  trying().Free(kDev, first.address);
  const std::vector<int64_t> before = Values(trying().GetStats(kDev));
  const int calls = backend().calls;
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kA, kS0, 8 * kMiB).has_value());  // larger than any
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kA, kS1, 4096).has_value());      // another stream
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kB, kS0, 4096).has_value());      // another client
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kA, kS0, 0).has_value());
  EXPECT_FALSE(trying().TryAllocateCached(DeviceIndex(1), kA, kS0, 4096).has_value());
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kA, kS0, uint64_t{1} << 62).has_value());
  EXPECT_EQ(backend().calls, calls);
  EXPECT_EQ(Values(trying().GetStats(kDev)), before);
  // The block is still there for one that fits.
  std::optional<AllocationResult> again = trying().TryAllocateCached(kDev, kA, kS0, 4096);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->address, first.address);
  EXPECT_TRUE(trying().TryFree(kDev, again->address));
}

TEST_F(AllocatorTryTest, StepsAsideForWorkOnOtherStreamsAndPendingFrees) {
  absl::StatusOr<BackendStream> side = hosts_[1]->CreateStream(kDev, 0);
  ASSERT_OK(side);
  const AllocationResult used = *trying().Allocate(kDev, kA, kS0, 4096);
  const AllocationResult other = *trying().Allocate(kDev, kA, kS0, 4096);
  trying().RecordStream(kDev, used.address, kS1, *side);
  // Its free records an event on the side stream: the backend's work.
  const std::vector<int64_t> before = Values(trying().GetStats(kDev));
  EXPECT_FALSE(trying().TryFree(kDev, used.address));
  EXPECT_EQ(Values(trying().GetStats(kDev)), before);
  trying().Free(kDev, used.address);
  // A free is pending: retiring it queries the backend, so Allocate does it.
  trying().Free(kDev, other.address);
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kA, kS0, 4096).has_value());
  ASSERT_OK(hosts_[1]->SynchronizeStream(*side));
  EXPECT_OK(trying().Allocate(kDev, kA, kS0, 4096).status());  // retires it
  EXPECT_TRUE(trying().TryAllocateCached(kDev, kA, kS0, 4096).has_value());
  ASSERT_OK(hosts_[1]->DestroyStream(*side));
}

TEST_F(AllocatorTryTest, StepsAsideForDedicatedSegmentsAndGarbageCollection) {
  const AllocationResult dedicated = *trying().Allocate(kDev, kA, kS0, 4096, /*dedicated=*/true);
  EXPECT_FALSE(trying().TryFree(kDev, dedicated.address));  // returns its segment
  trying().Free(kDev, dedicated.address);

  auto options = AllocatorOptions::Parse("garbage_collection_threshold:0.5");
  ASSERT_OK(options);
  CachingAllocator collecting(counting_[1].get(), *options, [](DeviceIndex, SegmentId) {});
  collecting.SetMemoryLimit(kDev, kA, 64 * kMiB);
  const AllocationResult block = *collecting.Allocate(kDev, kA, kS0, 4096);
  EXPECT_TRUE(collecting.TryFree(kDev, block.address));
  // Each lookup of a free block counts towards garbage collection: Allocate's.
  EXPECT_FALSE(collecting.TryAllocateCached(kDev, kA, kS0, 4096).has_value());
}

TEST_F(AllocatorTryTest, NeverWaitsForAThreadHoldingTheDeviceLock) {
  const AllocationResult cached = *trying().Allocate(kDev, kA, kS0, 4096);
  const AllocationResult held = *trying().Allocate(kDev, kA, kS0, 4096);
  trying().Free(kDev, cached.address);
  backend().hold_segments = true;
  // Another thread's allocation waits in the backend for a new segment,
  // holding the device's lock, as a lease from the daemon does.
  std::thread other([&] { EXPECT_OK(trying().Allocate(kDev, kB, kS0, 64 * kMiB).status()); });
  backend().entered.WaitForNotification();
  EXPECT_FALSE(trying().TryAllocateCached(kDev, kA, kS0, 4096).has_value());
  EXPECT_FALSE(trying().TryFree(kDev, held.address));
  backend().release.Notify();
  other.join();
  EXPECT_TRUE(trying().TryFree(kDev, held.address));
  EXPECT_TRUE(trying().TryAllocateCached(kDev, kA, kS0, 4096).has_value());
}

}  // namespace
}  // namespace gpumux::testing
