// CachingAllocator's contracts beyond PyTorch's rules: callbacks run without
// the lock, backend errors other than out-of-memory pass through, and
// concurrent clients on several devices keep consistent books.

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/forwarding_backend.h"
#include "tests/allocator/allocator_test_util.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

// A HostBackend that can be told to fail AllocateSegment with INTERNAL.
class FailingBackend final : public ForwardingBackend {
 public:
  explicit FailingBackend(std::unique_ptr<HostBackend> host)
      : ForwardingBackend(host.get()), host_(std::move(host)) {}
  absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex d, uint64_t size) override {
    if (fail_) return absl::InternalError("injected driver failure");
    return host_->AllocateSegment(d, size);
  }
  void set_fail(bool fail) { fail_ = fail; }

 private:
  std::unique_ptr<HostBackend> host_;
  bool fail_ = false;
};

std::unique_ptr<HostBackend> MakeHost(int devices, uint64_t memory) {
  HostBackend::Options options;
  options.device_count = devices;
  options.device_memory = memory;
  absl::StatusOr<std::unique_ptr<HostBackend>> host = HostBackend::Create(options);
  EXPECT_OK(host);
  return host.ok() ? std::move(*host) : nullptr;
}

TEST(CachingAllocatorContractTest, SegmentReleasedCallbackRunsWithoutTheLock) {
  std::unique_ptr<HostBackend> host = MakeHost(1, 64 * kMiB);
  std::vector<int64_t> reserved_seen;
  std::unique_ptr<CachingAllocator> allocator;
  allocator = std::make_unique<CachingAllocator>(
      host.get(), AllocatorOptions{}, [&](DeviceIndex device, SegmentId) {
        // Calling back in would deadlock if the device mutex were held.
        reserved_seen.push_back(allocator->GetStats(device).reserved_bytes[kAggregate].current);
      });
  absl::StatusOr<AllocationResult> r = allocator->Allocate(kDev, kA, kS0, 3 * kMiB, true);
  ASSERT_OK(r);
  allocator->Free(kDev, r->address);
  EXPECT_EQ(reserved_seen, std::vector<int64_t>{0});
}

TEST(CachingAllocatorContractTest, BackendErrorsOtherThanOutOfMemoryPassThrough) {
  auto backend = std::make_unique<FailingBackend>(MakeHost(1, 64 * kMiB));
  CachingAllocator allocator(backend.get(), AllocatorOptions{});
  backend->set_fail(true);
  EXPECT_THAT(allocator.Allocate(kDev, kA, kS0, kMiB),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("injected driver failure")));
  EXPECT_EQ(allocator.GetStats(kDev).num_ooms, 0);
  EXPECT_EQ(allocator.GetStats(kDev).num_alloc_retries, 0);
  backend->set_fail(false);
  EXPECT_OK(allocator.Allocate(kDev, kA, kS0, kMiB));
}

// In PyTorch's default mode and in compact mode (expandable segments).
class ConcurrentClientsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ConcurrentClientsTest, ConcurrentClientsOnTwoDevicesKeepConsistentBooks) {
  std::unique_ptr<HostBackend> host = MakeHost(2, 128 * kMiB);
  std::atomic<int> released{0};
  std::atomic<int> unmapped{0};
  absl::StatusOr<AllocatorOptions> options = AllocatorOptions::Parse(GetParam());
  ASSERT_OK(options);
  const bool expandable = options->expandable_segments;
  CachingAllocator allocator(host.get(), *options,
                             [&](DeviceIndex, SegmentId) { released.fetch_add(1); });
  allocator.SetPagesUnmappedCallback(
      [&](DeviceIndex, SegmentId, uint64_t, uint64_t) { unmapped.fetch_add(1); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&allocator, t] {
      std::mt19937_64 rng(t);
      const DeviceIndex device(t % 2);
      const ClientId client(100 + t);
      std::vector<uint64_t> live;
      for (int op = 0; op < 2000; ++op) {
        if (live.empty() || rng() % 3 != 0) {
          const uint64_t size = rng() % 2 ? 1 + rng() % kMiB : kMiB + rng() % (12 * kMiB);
          absl::StatusOr<AllocationResult> r = allocator.Allocate(device, client, kS0, size);
          if (r.ok()) live.push_back(r->address);
          if (live.size() > 20) {
            allocator.Free(device, live.front());
            live.erase(live.begin());
          }
        } else {
          allocator.Free(device, live.back());
          live.pop_back();
        }
        if (op % 500 == 0) allocator.EmptyCache(device, std::nullopt);
      }
      for (uint64_t address : live) allocator.Free(device, address);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int d = 0; d < 2; ++d) {
    const DeviceIndex device(d);
    const std::vector<SegmentSnapshot> segments = allocator.Snapshot(device, std::nullopt);
    ExpectConsistent(allocator.GetStats(device), segments, std::nullopt);
    for (int t = d; t < 4; t += 2) {
      ExpectConsistent(allocator.GetClientStats(device, ClientId(100 + t)), segments,
                       ClientId(100 + t));
    }
    EXPECT_EQ(allocator.GetStats(device).allocation[kAggregate].current, 0);
  }
  const EmptyCacheResult emptied = allocator.EmptyCache(std::nullopt, std::nullopt);
  EXPECT_GT(emptied.released_segments, 0u);
  EXPECT_EQ(allocator.GetStats(DeviceIndex(0)).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(allocator.GetStats(DeviceIndex(1)).reserved_bytes[kAggregate].current, 0);
  // A cudaFree per segment released; in compact mode an unmap per run of
  // pages instead, and the ranges go back with their last pages.
  const int64_t frees = allocator.GetStats(DeviceIndex(0)).num_device_free +
                        allocator.GetStats(DeviceIndex(1)).num_device_free;
  EXPECT_EQ(expandable ? unmapped.load() : released.load(), frees);
  if (expandable) {
    EXPECT_GT(released.load(), 0);
  } else {
    EXPECT_EQ(unmapped.load(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ConcurrentClientsTest,
                         ::testing::Values("", "compact_segments:True"));

}  // namespace
}  // namespace gpumux::testing
