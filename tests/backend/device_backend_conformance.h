#pragma once

// The typed conformance suite every DeviceBackend must pass (STYLE: one suite
// per interface). Each backend instantiates it in its own test executable
// (host_backend_test.cc; a CUDA one under the `gpu` label) with a factory:
//
//   struct MyFactory {
//     // A fresh backend with at least one device and at least 64 MiB free on
//     // device 0.
//     static absl::StatusOr<std::unique_ptr<DeviceBackend>> Create();
//     // A view of `segment`'s bytes from this process (the one that
//     // allocated it), used to check what another process wrote.
//     static absl::StatusOr<std::unique_ptr<SegmentView>> View(const BackendSegment& segment);
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(My, DeviceBackendConformanceTest, ::testing::Types<MyFactory>);
//
// Cross-process checks fork and exec segment_peer (see segment_peer.h), which
// maps a handle in a separate process the way a client does. The tests are
// templates, so this header is included by exactly one file per executable.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/device_backend.h"
#include "tests/backend/segment_peer.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {

// Reads and writes a segment's bytes from the allocating process.
class SegmentView {
 public:
  virtual ~SegmentView() = default;
  virtual absl::Status Read(uint64_t offset, void* out, uint64_t size) = 0;
  virtual absl::Status Write(uint64_t offset, const void* data, uint64_t size) = 0;
};

inline constexpr uint64_t kConformanceMiB = uint64_t{1} << 20;
inline constexpr DeviceIndex kConformanceDevice(0);

template <typename Factory>
class DeviceBackendConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<DeviceBackend>> backend = Factory::Create();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
  }

  std::unique_ptr<DeviceBackend> backend_;
};

TYPED_TEST_SUITE_P(DeviceBackendConformanceTest);

TYPED_TEST_P(DeviceBackendConformanceTest, DescribesEveryDevice) {
  DeviceBackend& backend = *this->backend_;
  EXPECT_THAT(std::string(backend.name()), ::testing::AnyOf("host", "cuda"));
  ASSERT_GE(backend.device_count(), 1);
  for (int i = 0; i < backend.device_count(); ++i) {
    const DeviceInfo& info = backend.device_info(DeviceIndex(i));
    EXPECT_EQ(info.index, DeviceIndex(i));
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.total_memory, 0u);
    EXPECT_GT(info.multi_processor_count, 0);
    EXPECT_LE(backend.FreeMemory(DeviceIndex(i)), info.total_memory);
    EXPECT_OK(backend.Synchronize(DeviceIndex(i)));
  }
}

TYPED_TEST_P(DeviceBackendConformanceTest, SegmentIsZeroAndSharedWithAnotherProcess) {
  const uint64_t size = 4 * kConformanceMiB + 512;
  absl::StatusOr<BackendSegment> segment = this->backend_->AllocateSegment(kConformanceDevice, size);
  ASSERT_OK(segment);
  EXPECT_EQ(segment->size, size);
  EXPECT_FALSE(segment->handle.data.empty());
  absl::StatusOr<std::unique_ptr<SegmentView>> view = TypeParam::View(*segment);
  ASSERT_OK(view);

  std::vector<uint8_t> bytes(size, 0xff);
  ASSERT_OK((*view)->Read(0, bytes.data(), size));
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), 0), static_cast<ptrdiff_t>(size));

  // The peer checks the zeros itself, then writes its pattern.
  const uint32_t seed = 7;
  ASSERT_EQ(RunPeerFill(*segment, seed), kPeerOk);
  ASSERT_OK((*view)->Read(0, bytes.data(), size));
  uint64_t mismatches = 0;
  for (uint64_t i = 0; i < size; ++i) mismatches += bytes[i] != PeerPatternByte(i, seed);
  EXPECT_EQ(mismatches, 0u);
  view->reset();
  EXPECT_OK(this->backend_->ReleaseSegment(kConformanceDevice, segment->address));
}

TYPED_TEST_P(DeviceBackendConformanceTest, SegmentsDoNotOverlap) {
  DeviceBackend& backend = *this->backend_;
  std::vector<BackendSegment> segments;
  for (int d = 0; d < std::min(backend.device_count(), 2); ++d) {
    for (uint64_t size : {uint64_t{512}, uint64_t{4096}, 2 * kConformanceMiB + 512, 3 * kConformanceMiB, uint64_t{512}}) {
      absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(DeviceIndex(d), size);
      ASSERT_OK(segment);
      EXPECT_EQ(segment->size, size);
      segments.push_back(*std::move(segment));
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    for (size_t j = i + 1; j < segments.size(); ++j) {
      const BackendSegment& a = segments[i];
      const BackendSegment& b = segments[j];
      EXPECT_TRUE(a.address + a.size <= b.address || b.address + b.size <= a.address)
          << "segments " << i << " and " << j << " overlap";
      EXPECT_NE(a.handle.data, b.handle.data);
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    DeviceIndex device(i < 5 ? 0 : 1);
    EXPECT_OK(backend.ReleaseSegment(device, segments[i].address));
  }
}

TYPED_TEST_P(DeviceBackendConformanceTest, MoreThanFreeMemoryIsResourceExhausted) {
  DeviceBackend& backend = *this->backend_;
  const uint64_t free_before = backend.FreeMemory(kConformanceDevice);
  const uint64_t too_much = (free_before / (2 * kConformanceMiB) + 1) * (2 * kConformanceMiB);
  EXPECT_THAT(backend.AllocateSegment(kConformanceDevice, too_much),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(backend.FreeMemory(kConformanceDevice), free_before);
}

TYPED_TEST_P(DeviceBackendConformanceTest, BadSizesAreInvalidArgument) {
  DeviceBackend& backend = *this->backend_;
  for (uint64_t size : {uint64_t{0}, uint64_t{1}, uint64_t{511}, uint64_t{513}, uint64_t{1000},
                        kConformanceMiB + 1}) {
    EXPECT_THAT(backend.AllocateSegment(kConformanceDevice, size),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << "size " << size;
  }
}

TYPED_TEST_P(DeviceBackendConformanceTest, ReleasedHandleCannotBeOpened) {
  absl::StatusOr<BackendSegment> segment = this->backend_->AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(segment);
  ASSERT_EQ(RunPeerGone(segment->handle), kPeerStillOpenable);
  ASSERT_OK(this->backend_->ReleaseSegment(kConformanceDevice, segment->address));
  EXPECT_EQ(RunPeerGone(segment->handle), kPeerOk);
}

TYPED_TEST_P(DeviceBackendConformanceTest, ReleasedAddressIsReused) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> first = backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(first);
  absl::StatusOr<BackendSegment> second = backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(second);
  ASSERT_OK(backend.ReleaseSegment(kConformanceDevice, first->address));
  absl::StatusOr<BackendSegment> again = backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(again);
  EXPECT_EQ(again->address, first->address);
  EXPECT_NE(again->handle.data, first->handle.data);
  EXPECT_OK(backend.ReleaseSegment(kConformanceDevice, second->address));
  EXPECT_OK(backend.ReleaseSegment(kConformanceDevice, again->address));
}

TYPED_TEST_P(DeviceBackendConformanceTest, FreeMemoryFollowsAllocations) {
  DeviceBackend& backend = *this->backend_;
  const uint64_t free_before = backend.FreeMemory(kConformanceDevice);
  absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(kConformanceDevice, 8 * kConformanceMiB);
  ASSERT_OK(segment);
  EXPECT_LE(backend.FreeMemory(kConformanceDevice), free_before - 8 * kConformanceMiB);
  ASSERT_OK(backend.ReleaseSegment(kConformanceDevice, segment->address));
  EXPECT_EQ(backend.FreeMemory(kConformanceDevice), free_before);
}

TYPED_TEST_P(DeviceBackendConformanceTest, ConcurrentAllocateAndReleaseFromTwoThreads) {
  DeviceBackend& backend = *this->backend_;
  const uint64_t free_before = backend.FreeMemory(kConformanceDevice);
  auto churn = [&backend](uint32_t seed, std::vector<absl::Status>* errors) {
    std::mt19937 rng(seed);
    std::vector<BackendSegment> live;
    for (int i = 0; i < 200; ++i) {
      if (live.size() < 4 && rng() % 3 != 0) {
        const uint64_t size = (1 + rng() % 1024) * 512;  // up to 512 KiB
        absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(kConformanceDevice, size);
        if (!segment.ok()) {
          errors->push_back(segment.status());
          continue;
        }
        live.push_back(*std::move(segment));
      } else if (!live.empty()) {
        const size_t k = rng() % live.size();
        absl::Status status = backend.ReleaseSegment(kConformanceDevice, live[k].address);
        if (!status.ok()) errors->push_back(status);
        live.erase(live.begin() + static_cast<ptrdiff_t>(k));
      }
    }
    for (const BackendSegment& segment : live) {
      absl::Status status = backend.ReleaseSegment(kConformanceDevice, segment.address);
      if (!status.ok()) errors->push_back(status);
    }
  };
  std::vector<absl::Status> errors_a;
  std::vector<absl::Status> errors_b;
  std::thread a(churn, 1, &errors_a);
  std::thread b(churn, 2, &errors_b);
  a.join();
  b.join();
  EXPECT_THAT(errors_a, ::testing::IsEmpty());
  EXPECT_THAT(errors_b, ::testing::IsEmpty());
  EXPECT_EQ(backend.FreeMemory(kConformanceDevice), free_before);
}

REGISTER_TYPED_TEST_SUITE_P(DeviceBackendConformanceTest, DescribesEveryDevice,
                            SegmentIsZeroAndSharedWithAnotherProcess, SegmentsDoNotOverlap,
                            MoreThanFreeMemoryIsResourceExhausted, BadSizesAreInvalidArgument,
                            ReleasedHandleCannotBeOpened, ReleasedAddressIsReused,
                            FreeMemoryFollowsAllocations,
                            ConcurrentAllocateAndReleaseFromTwoThreads);


}  // namespace gpumux::testing
