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
//     static absl::StatusOr<std::unique_ptr<SegmentView>> View(const DeviceBackend& backend,
//                                                              const BackendSegment& segment);
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(My, DeviceBackendConformanceTest, ::testing::Types<MyFactory>);
//
// Cross-process checks fork and exec segment_peer (see segment_peer.h), which
// maps a handle in a separate process the way a client does. The tests are
// templates, so this header is included by exactly one file per executable.
//
// Stream, event and copy tests check outcomes (order, data, codes), never
// that work is still pending: a GPU may finish anything before the next
// call. Backend-specific tests cover pending states where they can hold work
// back (the host backend's behind an interprocess event).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor/reduce.h"
#include "common/tensor/rng_fill.h"
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

// An OK StatusOr whose value matches `matcher`.
MATCHER_P(IsOkWith, matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(matcher, *arg, result_listener);
}

// `size` random bytes in [1, 255]: a copy that moved nothing (zeros) or the
// wrong bytes cannot pass.
inline std::vector<uint8_t> NonZeroRandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(1 + rng() % 255);
  return bytes;
}

// What FillRandom must write, computed by common/rng_fill on the host.
inline std::vector<uint8_t> ExpectedRandomBytes(const RngRequest& request, uint64_t seed,
                                                uint64_t offset) {
  std::vector<uint8_t> bytes(request.elements * RngElementSize(request.dtype));
  FillRandom(bytes.data(), request, seed, offset);
  return bytes;
}

template <typename Factory>
class DeviceBackendConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<DeviceBackend>> backend = Factory::Create();
    // A backend whose hardware this machine lacks (CUDA without a GPU).
    if (absl::IsUnavailable(backend.status())) GTEST_SKIP() << backend.status();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
  }

  // Synchronously copies device bytes back through the backend.
  absl::StatusOr<std::vector<uint8_t>> ReadBack(BackendStream stream, uint64_t address,
                                                uint64_t size) {
    std::vector<uint8_t> bytes(size);
    absl::Status status = backend_->CopyDeviceToHost(stream, bytes.data(), address, size, nullptr);
    if (status.ok()) status = backend_->SynchronizeStream(stream);
    if (!status.ok()) return status;
    return bytes;
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
    ASSERT_OK(backend.FreeMemory(DeviceIndex(i)));
    EXPECT_LE(*backend.FreeMemory(DeviceIndex(i)), info.total_memory);
    EXPECT_OK(backend.Synchronize(DeviceIndex(i)));
  }
}

TYPED_TEST_P(DeviceBackendConformanceTest, SegmentIsZeroAndSharedWithAnotherProcess) {
  const uint64_t size = 4 * kConformanceMiB + 512;
  absl::StatusOr<BackendSegment> segment =
      this->backend_->AllocateSegment(kConformanceDevice, size);
  ASSERT_OK(segment);
  EXPECT_EQ(segment->size, size);
  EXPECT_FALSE(segment->handle.data.empty());
  absl::StatusOr<std::unique_ptr<SegmentView>> view = TypeParam::View(*this->backend_, *segment);
  ASSERT_OK(view);

  std::vector<uint8_t> bytes(size, 0xff);
  ASSERT_OK((*view)->Read(0, bytes.data(), size));
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), 0), static_cast<ptrdiff_t>(size));

  // The peer checks the zeros itself, then writes its pattern.
  const uint32_t seed = 7;
  ASSERT_EQ(RunPeerFill(*this->backend_, *segment, seed), kPeerOk);
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
    for (uint64_t size : {uint64_t{512}, uint64_t{4096}, 2 * kConformanceMiB + 512,
                          3 * kConformanceMiB, uint64_t{512}}) {
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
  const uint64_t free_before = *backend.FreeMemory(kConformanceDevice);
  const uint64_t too_much = (free_before / (2 * kConformanceMiB) + 1) * (2 * kConformanceMiB);
  EXPECT_THAT(backend.AllocateSegment(kConformanceDevice, too_much),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(*backend.FreeMemory(kConformanceDevice), free_before);
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
  absl::StatusOr<BackendSegment> segment =
      this->backend_->AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(segment);
  ASSERT_EQ(RunPeerGone(*this->backend_, segment->handle), kPeerStillOpenable);
  ASSERT_OK(this->backend_->ReleaseSegment(kConformanceDevice, segment->address));
  EXPECT_EQ(RunPeerGone(*this->backend_, segment->handle), kPeerOk);
}

TYPED_TEST_P(DeviceBackendConformanceTest, ReleasedAddressIsReused) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> first =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(first);
  absl::StatusOr<BackendSegment> second =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(second);
  ASSERT_OK(backend.ReleaseSegment(kConformanceDevice, first->address));
  absl::StatusOr<BackendSegment> again =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(again);
  EXPECT_EQ(again->address, first->address);
  EXPECT_NE(again->handle.data, first->handle.data);
  EXPECT_OK(backend.ReleaseSegment(kConformanceDevice, second->address));
  EXPECT_OK(backend.ReleaseSegment(kConformanceDevice, again->address));
}

TYPED_TEST_P(DeviceBackendConformanceTest, FreeMemoryFollowsAllocations) {
  DeviceBackend& backend = *this->backend_;
  const uint64_t free_before = *backend.FreeMemory(kConformanceDevice);
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 8 * kConformanceMiB);
  ASSERT_OK(segment);
  EXPECT_LE(*backend.FreeMemory(kConformanceDevice), free_before - 8 * kConformanceMiB);
  ASSERT_OK(backend.ReleaseSegment(kConformanceDevice, segment->address));
  EXPECT_EQ(*backend.FreeMemory(kConformanceDevice), free_before);
}

TYPED_TEST_P(DeviceBackendConformanceTest, ConcurrentAllocateAndReleaseFromTwoThreads) {
  DeviceBackend& backend = *this->backend_;
  const uint64_t free_before = *backend.FreeMemory(kConformanceDevice);
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
  EXPECT_EQ(*backend.FreeMemory(kConformanceDevice), free_before);
}

// ---- Streams, events, copies ----

TYPED_TEST_P(DeviceBackendConformanceTest, StreamsHavePrioritiesAndLifetimes) {
  DeviceBackend& backend = *this->backend_;
  const StreamPriorityRange range = backend.GetStreamPriorityRange(kConformanceDevice);
  EXPECT_LE(range.greatest, range.least);
  absl::StatusOr<BackendStream> low = backend.CreateStream(kConformanceDevice, range.least);
  absl::StatusOr<BackendStream> high = backend.CreateStream(kConformanceDevice, range.greatest);
  ASSERT_OK(low);
  ASSERT_OK(high);
  EXPECT_NE(*low, *high);
  EXPECT_THAT(backend.QueryStream(*low), IsOkWith(true)) << "a new stream is idle";
  EXPECT_THAT(backend.CreateStream(kConformanceDevice, range.least + 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.CreateStream(kConformanceDevice, range.greatest - 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.CreateStream(DeviceIndex(backend.device_count()), range.least),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.CreateStream(DeviceIndex(-1), range.least),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(backend.SynchronizeStream(*low));
  EXPECT_OK(backend.DestroyStream(*low));
  EXPECT_THAT(backend.DestroyStream(*low), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(backend.QueryStream(*low), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(backend.SynchronizeStream(*low), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_OK(backend.DestroyStream(*high));
}

TYPED_TEST_P(DeviceBackendConformanceTest, UnknownStreamsAndEventsAreNotFound) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(kConformanceDevice, 4096);
  ASSERT_OK(segment);
  absl::StatusOr<BackendStream> live_stream = backend.CreateStream(kConformanceDevice, 0);
  absl::StatusOr<BackendEvent> live_event = backend.CreateEvent(kConformanceDevice, EventFlags{});
  ASSERT_OK(live_stream);
  ASSERT_OK(live_event);
  const BackendStream stream(live_stream->value() + live_event->value() + 1000);
  const BackendEvent event(live_stream->value() + live_event->value() + 1001);
  const auto kNotFound = StatusIs(absl::StatusCode::kNotFound);
  std::vector<uint8_t> host(64, 1);
  const RngRequest request{RngDtype::kF32, RngKind::kUniform, 4, 0.0, 1.0};
  EXPECT_THAT(backend.QueryStream(stream), kNotFound);
  EXPECT_THAT(backend.SynchronizeStream(stream), kNotFound);
  EXPECT_THAT(backend.DestroyStream(stream), kNotFound);
  EXPECT_THAT(backend.DestroyEvent(event), kNotFound);
  EXPECT_THAT(backend.QueryEvent(event), kNotFound);
  EXPECT_THAT(backend.SynchronizeEvent(event), kNotFound);
  EXPECT_THAT(backend.RecordEvent(event, *live_stream), kNotFound);
  EXPECT_THAT(backend.RecordEvent(*live_event, stream), kNotFound);
  EXPECT_THAT(backend.StreamWaitEvent(stream, *live_event), kNotFound);
  EXPECT_THAT(backend.StreamWaitEvent(*live_stream, event), kNotFound);
  EXPECT_THAT(backend.ElapsedTimeMs(event, *live_event), kNotFound);
  EXPECT_THAT(backend.ElapsedTimeMs(*live_event, event), kNotFound);
  EXPECT_THAT(backend.GetIpcEventHandle(event), kNotFound);
  EXPECT_THAT(backend.CopyDeviceToDevice(stream, kConformanceDevice, segment->address,
                                         kConformanceDevice, segment->address + 64, 64),
              kNotFound);
  EXPECT_THAT(backend.CopyHostToDevice(stream, segment->address, host.data(), 64, nullptr),
              kNotFound);
  EXPECT_THAT(backend.CopyDeviceToHost(stream, host.data(), segment->address, 64, nullptr),
              kNotFound);
  EXPECT_THAT(backend.Memset(stream, segment->address, 0, 64), kNotFound);
  EXPECT_THAT(backend.FillRandom(stream, segment->address, request, 1, 0), kNotFound);
  EXPECT_OK(backend.DestroyEvent(*live_event));
  EXPECT_THAT(backend.QueryEvent(*live_event), kNotFound);
}

TYPED_TEST_P(DeviceBackendConformanceTest, CopiesMoveRandomBytesOnEveryPath) {
  DeviceBackend& backend = *this->backend_;
  const DeviceIndex other(backend.device_count() > 1 ? 1 : 0);
  absl::StatusOr<BackendSegment> a =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  absl::StatusOr<BackendSegment> b =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  absl::StatusOr<BackendSegment> c = backend.AllocateSegment(other, 2 * kConformanceMiB);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  absl::StatusOr<BackendStream> other_stream = backend.CreateStream(other, 0);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  ASSERT_OK(stream);
  ASSERT_OK(other_stream);
  // Odd sizes and offsets: nothing may assume alignment.
  const uint64_t size = kConformanceMiB + 12345;
  const std::vector<uint8_t> data = NonZeroRandomBytes(size, 11);
  // host -> a+3, a+3 -> b+1001 (same device), b+1001 -> c+77 (across
  // devices, queued on the destination's stream), c+77 -> host.
  ASSERT_OK(backend.CopyHostToDevice(*stream, a->address + 3, data.data(), size, nullptr));
  ASSERT_OK(backend.CopyDeviceToDevice(*stream, kConformanceDevice, b->address + 1001,
                                       kConformanceDevice, a->address + 3, size));
  ASSERT_OK(backend.SynchronizeStream(*stream));
  ASSERT_OK(backend.CopyDeviceToDevice(*other_stream, other, c->address + 77, kConformanceDevice,
                                       b->address + 1001, size));
  ASSERT_OK(backend.SynchronizeStream(*other_stream));
  absl::StatusOr<std::vector<uint8_t>> back = this->ReadBack(*other_stream, c->address + 77, size);
  ASSERT_OK(back);
  EXPECT_TRUE(*back == data)
      << "host -> device -> device -> other device -> host changed the bytes";

  // The allocating process sees the same bytes, and nothing around them moved.
  absl::StatusOr<std::unique_ptr<SegmentView>> view = TypeParam::View(*this->backend_, *b);
  ASSERT_OK(view);
  std::vector<uint8_t> seen(size + 2);
  ASSERT_OK((*view)->Read(1000, seen.data(), size + 2));
  EXPECT_EQ(seen.front(), 0);
  EXPECT_EQ(seen.back(), 0);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), seen.begin() + 1));

  // Device -> host of a range the allocating process wrote.
  const std::vector<uint8_t> written = NonZeroRandomBytes(4097, 12);
  ASSERT_OK((*view)->Write(5, written.data(), written.size()));
  absl::StatusOr<std::vector<uint8_t>> read =
      this->ReadBack(*stream, b->address + 5, written.size());
  ASSERT_OK(read);
  EXPECT_TRUE(*read == written);

  // Overlapping ranges within one segment behave like memmove.
  std::vector<uint8_t> expected(data.begin(), data.begin() + 5000);
  ASSERT_OK(backend.CopyHostToDevice(*stream, a->address, data.data(), 5000, nullptr));
  ASSERT_OK(backend.CopyDeviceToDevice(*stream, kConformanceDevice, a->address + 10,
                                       kConformanceDevice, a->address, 4000));
  std::copy(data.begin(), data.begin() + 4000, expected.begin() + 10);
  absl::StatusOr<std::vector<uint8_t>> shifted = this->ReadBack(*stream, a->address, 5000);
  ASSERT_OK(shifted);
  EXPECT_TRUE(*shifted == expected);
}

TYPED_TEST_P(DeviceBackendConformanceTest, WorkOutsideSegmentsIsInvalidArgument) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(kConformanceDevice, 4096);
  absl::StatusOr<BackendSegment> released = backend.AllocateSegment(kConformanceDevice, 4096);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(released);
  ASSERT_OK(stream);
  ASSERT_OK(backend.ReleaseSegment(kConformanceDevice, released->address));
  std::vector<uint8_t> host(8192, 1);
  const uint64_t base = segment->address;
  const auto kInvalid = StatusIs(absl::StatusCode::kInvalidArgument);
  const RngRequest four_floats{RngDtype::kF32, RngKind::kUniform, 4, 0.0, 1.0};
  struct Range {
    uint64_t address;
    uint64_t bytes;
  };
  for (const Range& r :
       {Range{base + 4096, 1}, Range{base + 4000, 97}, Range{base - 1, 2}, Range{base, 4097},
        Range{base + 1, UINT64_MAX}, Range{released->address, 16}}) {
    SCOPED_TRACE(::testing::Message()
                 << "address base+" << (r.address - base) << ", " << r.bytes << " bytes");
    const uint64_t bytes = std::min<uint64_t>(r.bytes, host.size());
    if (r.bytes <= host.size()) {
      EXPECT_THAT(backend.CopyHostToDevice(*stream, r.address, host.data(), bytes, nullptr),
                  kInvalid);
      EXPECT_THAT(backend.CopyDeviceToHost(*stream, host.data(), r.address, bytes, nullptr),
                  kInvalid);
    }
    EXPECT_THAT(backend.Memset(*stream, r.address, 7, r.bytes), kInvalid);
    EXPECT_THAT(backend.CopyDeviceToDevice(*stream, kConformanceDevice, r.address,
                                           kConformanceDevice, base, r.bytes),
                kInvalid);
    EXPECT_THAT(backend.CopyDeviceToDevice(*stream, kConformanceDevice, base, kConformanceDevice,
                                           r.address, r.bytes),
                kInvalid);
  }
  // 4 floats at base + 4084 end at base + 4100.
  EXPECT_THAT(backend.FillRandom(*stream, base + 4084, four_floats, 1, 0), kInvalid);
  EXPECT_OK(backend.FillRandom(*stream, base + 4080, four_floats, 1, 0));
  // A single-address call works on the stream's device only.
  if (backend.device_count() > 1) {
    absl::StatusOr<BackendStream> other_stream = backend.CreateStream(DeviceIndex(1), 0);
    ASSERT_OK(other_stream);
    EXPECT_THAT(backend.Memset(*other_stream, base, 0, 16), kInvalid);
    EXPECT_THAT(
        backend.CopyDeviceToDevice(*stream, DeviceIndex(1), base, kConformanceDevice, base, 16),
        kInvalid);
  }
  EXPECT_THAT(backend.CopyDeviceToDevice(*stream, DeviceIndex(backend.device_count()), base,
                                         kConformanceDevice, base, 16),
              kInvalid);
  EXPECT_THAT(backend.CopyHostToDevice(*stream, base, nullptr, 16, nullptr), kInvalid);
  EXPECT_THAT(backend.CopyDeviceToHost(*stream, nullptr, base, 16, nullptr), kInvalid);
  // The last byte, and zero bytes anywhere, are fine.
  EXPECT_OK(backend.Memset(*stream, base + 4095, 7, 1));
  EXPECT_OK(backend.Memset(*stream, released->address, 7, 0));
  EXPECT_OK(backend.SynchronizeStream(*stream));
}

TYPED_TEST_P(DeviceBackendConformanceTest, MemsetWritesExactlyItsRange) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(kConformanceDevice, 8192);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  const std::vector<uint8_t> data = NonZeroRandomBytes(8192, 21);
  ASSERT_OK(backend.CopyHostToDevice(*stream, segment->address, data.data(), data.size(), nullptr));
  ASSERT_OK(backend.Memset(*stream, segment->address + 333, 0, 3001));
  ASSERT_OK(backend.Memset(*stream, segment->address + 5000, 0xab, 7));
  absl::StatusOr<std::vector<uint8_t>> back =
      this->ReadBack(*stream, segment->address, data.size());
  ASSERT_OK(back);
  std::vector<uint8_t> expected = data;
  std::fill(expected.begin() + 333, expected.begin() + 333 + 3001, 0);
  std::fill(expected.begin() + 5000, expected.begin() + 5007, 0xab);
  EXPECT_TRUE(*back == expected);
}

TYPED_TEST_P(DeviceBackendConformanceTest, FillRandomMatchesTheHostGenerator) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  // Uniform and raw bits are bit-identical on every backend (philox.h); odd
  // element counts and an unaligned destination.
  const RngRequest requests[] = {
      {RngDtype::kF32, RngKind::kUniform, 100003, -2.0, 3.0},
      {RngDtype::kF64, RngKind::kUniform, 4097, 0.0, 1.0},
      {RngDtype::kF16, RngKind::kUniform, 999, -1.0, 1.0},
      {RngDtype::kBF16, RngKind::kUniform, 1001, 0.0, 10.0},
      {RngDtype::kI32, RngKind::kUniform, 777, -50.0, 50.0},
      {RngDtype::kI64, RngKind::kBits, 555, 0.0, 1.0},
      {RngDtype::kU8, RngKind::kUniform, 12345, 0.0, 256.0},
  };
  uint64_t offset = 8;
  for (const RngRequest& request : requests) {
    SCOPED_TRACE(::testing::Message() << "dtype " << static_cast<int>(request.dtype) << ", kind "
                                      << static_cast<int>(request.kind));
    const std::vector<uint8_t> expected = ExpectedRandomBytes(request, 1234, offset);
    ASSERT_OK(backend.Memset(*stream, segment->address, 0, expected.size() + 8));
    ASSERT_OK(backend.FillRandom(*stream, segment->address + 3, request, 1234, offset));
    absl::StatusOr<std::vector<uint8_t>> back =
        this->ReadBack(*stream, segment->address, expected.size() + 4);
    ASSERT_OK(back);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), back->begin() + 3));
    EXPECT_EQ((*back)[2], 0) << "wrote before its destination";
    EXPECT_EQ((*back)[expected.size() + 3], 0) << "wrote past its elements";
    offset += RngOffsetIncrement(request);
  }
}

TYPED_TEST_P(DeviceBackendConformanceTest, BadRandomRequestsAreInvalidArgument) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(kConformanceDevice, 4096);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  const auto kInvalid = StatusIs(absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.FillRandom(*stream, segment->address,
                                 {RngDtype::kF32, RngKind::kUniform, 0, 0, 1}, 1, 0),
              kInvalid);
  EXPECT_THAT(backend.FillRandom(*stream, segment->address,
                                 {RngDtype::kF32, RngKind::kUniform, 4, 1, 0}, 1, 0),
              kInvalid);
  EXPECT_THAT(backend.FillRandom(*stream, segment->address,
                                 {RngDtype::kI32, RngKind::kNormal, 4, 0, 1}, 1, 0),
              kInvalid);
  EXPECT_THAT(backend.FillRandom(*stream, segment->address,
                                 {RngDtype::kF32, RngKind::kUniform, 4, 0, 1}, 1, 2),
              kInvalid);
}

TYPED_TEST_P(DeviceBackendConformanceTest, WorkOnOneStreamCompletesInOrder) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 16 * kConformanceMiB);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  // A large fill, then small writes over its start: the small ones must land
  // after it even though they would finish first on their own.
  const RngRequest big{RngDtype::kF32, RngKind::kUniform, 4 * kConformanceMiB, 0.0, 1.0};
  const std::vector<uint8_t> patch = NonZeroRandomBytes(100, 31);
  ASSERT_OK(backend.FillRandom(*stream, segment->address, big, 99, 0));
  ASSERT_OK(backend.Memset(*stream, segment->address, 0x5a, 64));
  ASSERT_OK(backend.CopyHostToDevice(*stream, segment->address + 32, patch.data(), patch.size(),
                                     nullptr));
  std::vector<uint8_t> head(256);
  std::vector<uint8_t> tail(256);
  ASSERT_OK(backend.CopyDeviceToHost(*stream, head.data(), segment->address, head.size(), nullptr));
  ASSERT_OK(backend.CopyDeviceToHost(
      *stream, tail.data(), segment->address + 16 * kConformanceMiB - 256, tail.size(), nullptr));
  ASSERT_OK(backend.SynchronizeStream(*stream));
  EXPECT_THAT(backend.QueryStream(*stream), IsOkWith(true));

  std::vector<uint8_t> expected_head(256);
  const RngRequest head_request{RngDtype::kF32, RngKind::kUniform, 64, 0.0, 1.0};
  FillRandom(expected_head.data(), head_request, 99, 0);
  std::fill(expected_head.begin(), expected_head.begin() + 64, 0x5a);
  std::copy(patch.begin(), patch.end(), expected_head.begin() + 32);
  EXPECT_TRUE(head == expected_head);
  const std::vector<uint8_t> full = ExpectedRandomBytes(big, 99, 0);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), full.end() - 256));
}

TYPED_TEST_P(DeviceBackendConformanceTest, StreamWaitEventOrdersWorkAcrossStreams) {
  DeviceBackend& backend = *this->backend_;
  const uint64_t size = 16 * kConformanceMiB;
  absl::StatusOr<BackendSegment> x = backend.AllocateSegment(kConformanceDevice, size);
  absl::StatusOr<BackendSegment> y = backend.AllocateSegment(kConformanceDevice, size);
  absl::StatusOr<BackendStream> producer = backend.CreateStream(kConformanceDevice, 0);
  absl::StatusOr<BackendStream> consumer = backend.CreateStream(kConformanceDevice, 0);
  absl::StatusOr<BackendEvent> ready = backend.CreateEvent(kConformanceDevice, EventFlags{});
  ASSERT_OK(x);
  ASSERT_OK(y);
  ASSERT_OK(producer);
  ASSERT_OK(consumer);
  ASSERT_OK(ready);
  const RngRequest request{RngDtype::kI32, RngKind::kBits, size / 4, 0.0, 1.0};
  ASSERT_OK(backend.FillRandom(*producer, x->address, request, 5, 0));
  ASSERT_OK(backend.RecordEvent(*ready, *producer));
  ASSERT_OK(backend.StreamWaitEvent(*consumer, *ready));
  ASSERT_OK(backend.CopyDeviceToDevice(*consumer, kConformanceDevice, y->address,
                                       kConformanceDevice, x->address, size));
  // The event may go away while the wait is queued.
  ASSERT_OK(backend.DestroyEvent(*ready));
  absl::StatusOr<std::vector<uint8_t>> copied = this->ReadBack(*consumer, y->address, size);
  ASSERT_OK(copied);
  EXPECT_TRUE(*copied == ExpectedRandomBytes(request, 5, 0))
      << "the copy ran before the fill it waited for";
}

TYPED_TEST_P(DeviceBackendConformanceTest, EventsQuerySynchronizeAndTime) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 16 * kConformanceMiB);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  EventFlags timing;
  timing.enable_timing = true;
  absl::StatusOr<BackendEvent> start = backend.CreateEvent(kConformanceDevice, timing);
  EventFlags blocking_timing = timing;
  blocking_timing.blocking = true;
  absl::StatusOr<BackendEvent> end = backend.CreateEvent(kConformanceDevice, blocking_timing);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  ASSERT_OK(start);
  ASSERT_OK(end);
  // Never recorded: complete, and synchronizing returns at once.
  EXPECT_THAT(backend.QueryEvent(*start), IsOkWith(true));
  EXPECT_OK(backend.SynchronizeEvent(*start));
  ASSERT_OK(backend.RecordEvent(*start, *stream));
  ASSERT_OK(backend.FillRandom(*stream, segment->address,
                               {RngDtype::kF32, RngKind::kUniform, 4 * kConformanceMiB, 0.0, 1.0},
                               3, 0));
  ASSERT_OK(backend.RecordEvent(*end, *stream));
  ASSERT_OK(backend.SynchronizeEvent(*end));
  EXPECT_THAT(backend.QueryEvent(*end), IsOkWith(true));
  EXPECT_THAT(backend.QueryEvent(*start), IsOkWith(true)) << "recorded before end on one stream";
  absl::StatusOr<float> elapsed = backend.ElapsedTimeMs(*start, *end);
  ASSERT_OK(elapsed);
  EXPECT_GE(*elapsed, 0.0f);
  EXPECT_LT(*elapsed, 10000.0f);
  // Re-recording moves the event: start now lies after end.
  ASSERT_OK(backend.RecordEvent(*start, *stream));
  ASSERT_OK(backend.SynchronizeStream(*stream));
  absl::StatusOr<float> backwards = backend.ElapsedTimeMs(*end, *start);
  ASSERT_OK(backwards);
  EXPECT_GE(*backwards, 0.0f);
}

TYPED_TEST_P(DeviceBackendConformanceTest, ElapsedTimeNeedsTimingRecordedEvents) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  EventFlags timing;
  timing.enable_timing = true;
  absl::StatusOr<BackendEvent> plain = backend.CreateEvent(kConformanceDevice, EventFlags{});
  absl::StatusOr<BackendEvent> timed = backend.CreateEvent(kConformanceDevice, timing);
  absl::StatusOr<BackendEvent> unrecorded = backend.CreateEvent(kConformanceDevice, timing);
  ASSERT_OK(stream);
  ASSERT_OK(plain);
  ASSERT_OK(timed);
  ASSERT_OK(unrecorded);
  ASSERT_OK(backend.RecordEvent(*plain, *stream));
  ASSERT_OK(backend.RecordEvent(*timed, *stream));
  ASSERT_OK(backend.SynchronizeStream(*stream));
  const auto kNoTiming =
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "Both events must be created with argument 'enable_timing=True'.");
  EXPECT_THAT(backend.ElapsedTimeMs(*plain, *timed), kNoTiming);
  EXPECT_THAT(backend.ElapsedTimeMs(*timed, *plain), kNoTiming);
  EXPECT_THAT(backend.ElapsedTimeMs(*timed, *unrecorded),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(backend.ElapsedTimeMs(*unrecorded, *timed),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(backend.ElapsedTimeMs(*timed, *timed), IsOkWith(0.0f));
}

TYPED_TEST_P(DeviceBackendConformanceTest, RecordingOnAnotherDevicesStreamIsInvalidArgument) {
  DeviceBackend& backend = *this->backend_;
  if (backend.device_count() < 2) GTEST_SKIP() << "needs two devices";
  absl::StatusOr<BackendStream> stream1 = backend.CreateStream(DeviceIndex(1), 0);
  absl::StatusOr<BackendStream> stream0 = backend.CreateStream(DeviceIndex(0), 0);
  absl::StatusOr<BackendEvent> event0 = backend.CreateEvent(DeviceIndex(0), EventFlags{});
  ASSERT_OK(stream1);
  ASSERT_OK(stream0);
  ASSERT_OK(event0);
  EXPECT_THAT(backend.RecordEvent(*event0, *stream1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Event device 0 does not match recording stream's device 1."));
  // Waiting across devices is allowed.
  ASSERT_OK(backend.RecordEvent(*event0, *stream0));
  EXPECT_OK(backend.StreamWaitEvent(*stream1, *event0));
  EXPECT_OK(backend.SynchronizeStream(*stream1));
}

TYPED_TEST_P(DeviceBackendConformanceTest, InterprocessEventHandles) {
  DeviceBackend& backend = *this->backend_;
  EventFlags ipc_timing;
  ipc_timing.interprocess = true;
  ipc_timing.enable_timing = true;
  EXPECT_THAT(backend.CreateEvent(kConformanceDevice, ipc_timing),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EventFlags ipc;
  ipc.interprocess = true;
  absl::StatusOr<BackendEvent> shared = backend.CreateEvent(kConformanceDevice, ipc);
  absl::StatusOr<BackendEvent> plain = backend.CreateEvent(kConformanceDevice, EventFlags{});
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(shared);
  ASSERT_OK(plain);
  ASSERT_OK(stream);
  EXPECT_THAT(backend.GetIpcEventHandle(*plain), StatusIs(absl::StatusCode::kFailedPrecondition));
  absl::StatusOr<std::string> handle = backend.GetIpcEventHandle(*shared);
  ASSERT_OK(handle);
  EXPECT_EQ(handle->size(), kIpcEventHandleBytes);
  ASSERT_OK(backend.RecordEvent(*shared, *stream));
  EXPECT_OK(backend.SynchronizeEvent(*shared));
  EXPECT_THAT(backend.QueryEvent(*shared), IsOkWith(true));
  const auto kInvalid = StatusIs(absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.OpenIpcEventHandle(kConformanceDevice, handle->substr(1)), kInvalid);
  EXPECT_THAT(backend.OpenIpcEventHandle(kConformanceDevice, *handle + "x"), kInvalid);
  EXPECT_THAT(
      backend.OpenIpcEventHandle(kConformanceDevice, std::string(kIpcEventHandleBytes, '\xee')),
      kInvalid);
  EXPECT_THAT(backend.OpenIpcEventHandle(DeviceIndex(backend.device_count()), *handle), kInvalid);
}

TYPED_TEST_P(DeviceBackendConformanceTest, DestroyedStreamFinishesItsWork) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 16 * kConformanceMiB);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  // Fill all 16 MiB, overwrite the last 4 MiB from the host, read back the
  // second half; then destroy the stream before any of it need have run.
  const RngRequest request{RngDtype::kF32, RngKind::kUniform, 4 * kConformanceMiB, 0.0, 1.0};
  auto data = std::make_shared<std::vector<uint8_t>>(NonZeroRandomBytes(4 * kConformanceMiB, 41));
  auto out = std::make_shared<std::vector<uint8_t>>(8 * kConformanceMiB);
  std::weak_ptr<std::vector<uint8_t>> data_alive = data;
  ASSERT_OK(backend.FillRandom(*stream, segment->address, request, 8, 0));
  ASSERT_OK(backend.CopyHostToDevice(*stream, segment->address + 12 * kConformanceMiB, data->data(),
                                     data->size(), data));
  ASSERT_OK(backend.CopyDeviceToHost(*stream, out->data(), segment->address + 8 * kConformanceMiB,
                                     out->size(), out));
  data.reset();  // only the backend holds it now, until the copy ran
  ASSERT_OK(backend.DestroyStream(*stream));
  ASSERT_OK(backend.Synchronize(kConformanceDevice));
  EXPECT_TRUE(data_alive.expired()) << "keep_alive outlived its work";
  EXPECT_EQ(out.use_count(), 1) << "keep_alive outlived its work";
  std::vector<uint8_t> expected = ExpectedRandomBytes(request, 8, 0);
  expected.erase(expected.begin(), expected.begin() + 8 * kConformanceMiB);
  const std::vector<uint8_t> again = NonZeroRandomBytes(4 * kConformanceMiB, 41);
  std::copy(again.begin(), again.end(), expected.begin() + 4 * kConformanceMiB);
  EXPECT_TRUE(*out == expected);
}

TYPED_TEST_P(DeviceBackendConformanceTest, SynchronizeDeviceWaitsForEveryStream) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 16 * kConformanceMiB);
  ASSERT_OK(segment);
  std::vector<BackendStream> streams;
  std::vector<std::vector<uint8_t>> outputs(4, std::vector<uint8_t>(64));
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
    ASSERT_OK(stream);
    const uint64_t at = segment->address + static_cast<uint64_t>(i) * 4 * kConformanceMiB;
    ASSERT_OK(backend.FillRandom(*stream, at,
                                 {RngDtype::kF32, RngKind::kUniform, kConformanceMiB, 0.0, 1.0},
                                 100 + static_cast<uint64_t>(i), 0));
    ASSERT_OK(backend.CopyDeviceToHost(*stream, outputs[i].data(), at + 4 * kConformanceMiB - 64,
                                       64, nullptr));
    streams.push_back(*stream);
  }
  ASSERT_OK(backend.Synchronize(kConformanceDevice));
  for (int i = 0; i < 4; ++i) {
    EXPECT_THAT(backend.QueryStream(streams[i]), IsOkWith(true));
    const std::vector<uint8_t> expected =
        ExpectedRandomBytes({RngDtype::kF32, RngKind::kUniform, kConformanceMiB, 0.0, 1.0},
                            100 + static_cast<uint64_t>(i), 0);
    EXPECT_TRUE(std::equal(outputs[i].begin(), outputs[i].end(), expected.end() - 64))
        << "stream " << i;
  }
}

TYPED_TEST_P(DeviceBackendConformanceTest, PinsAndUnpinsHostMemory) {
  DeviceBackend& backend = *this->backend_;
  std::vector<uint8_t> buffer(kConformanceMiB);
  EXPECT_THAT(backend.PinHostMemory(nullptr, 4096), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.PinHostMemory(buffer.data(), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.UnpinHostMemory(nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.UnpinHostMemory(buffer.data()), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(backend.PinHostMemory(buffer.data(), buffer.size()));
  EXPECT_THAT(backend.PinHostMemory(buffer.data(), buffer.size()),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_OK(backend.UnpinHostMemory(buffer.data()));
  EXPECT_THAT(backend.UnpinHostMemory(buffer.data()), StatusIs(absl::StatusCode::kNotFound));
}

// Reduce against common/tensor/reduce.h's host steps (the reference for every
// engine), for every op and dtype, aligned and not; FinishAverage likewise.
TYPED_TEST_P(DeviceBackendConformanceTest, ReduceMatchesTheHostSteps) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  EXPECT_TRUE(backend.CanReadPeer(kConformanceDevice, kConformanceDevice));
  const uint64_t count = 10007;
  uint64_t seed = 1;
  for (RngDtype dtype : {RngDtype::kF32, RngDtype::kF64, RngDtype::kF16, RngDtype::kBF16,
                         RngDtype::kI32, RngDtype::kI64, RngDtype::kU8}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      for (uint64_t misalign : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << "dtype " << static_cast<int>(dtype) << " op "
                                          << ReduceOpName(op) << " misalign " << misalign);
        const bool integral =
            dtype == RngDtype::kI32 || dtype == RngDtype::kI64 || dtype == RngDtype::kU8;
        const RngRequest request{dtype, RngKind::kUniform, count, integral ? -50.0 : -3.0,
                                 integral ? 50.0 : 3.0};
        const RngRequest bytes_request{dtype, RngKind::kUniform, count,
                                       dtype == RngDtype::kU8 ? 0.0 : request.a, request.b};
        const uint64_t bytes = count * RngElementSize(dtype);
        const uint64_t dst = segment->address + misalign;
        const uint64_t src = segment->address + kConformanceMiB + misalign;
        std::vector<uint8_t> a = ExpectedRandomBytes(bytes_request, seed, 0);
        std::vector<uint8_t> b = ExpectedRandomBytes(bytes_request, seed + 1, 0);
        seed += 2;
        ASSERT_OK(backend.CopyHostToDevice(*stream, dst, a.data(), bytes, nullptr));
        ASSERT_OK(backend.CopyHostToDevice(*stream, src, b.data(), bytes, nullptr));
        ASSERT_OK(backend.Reduce(*stream, op, dtype, dst, kConformanceDevice, src, count));
        if (op == ReduceOp::kAvg) {
          ASSERT_OK(backend.FinishAverage(*stream, dtype, dst, count, 3));
        }
        absl::StatusOr<std::vector<uint8_t>> back = this->ReadBack(*stream, dst, bytes);
        ASSERT_OK(back);
        Accumulate(op, dtype, a.data(), b.data(), count);
        if (op == ReduceOp::kAvg) FinishAverage(dtype, a.data(), count, 3);
        EXPECT_TRUE(*back == a);
      }
    }
  }
  // Out of a segment: INVALID_ARGUMENT, like every call of work.
  EXPECT_THAT(backend.Reduce(*stream, ReduceOp::kSum, RngDtype::kF32,
                             segment->address + 2 * kConformanceMiB - 4, kConformanceDevice,
                             segment->address, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A 2D copy moves exactly its rows, with any pitches, and nothing between them.
TYPED_TEST_P(DeviceBackendConformanceTest, Copy2DMovesExactlyItsRows) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment = backend.AllocateSegment(kConformanceDevice, 65536);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  const std::vector<uint8_t> data = NonZeroRandomBytes(32768, 31);
  ASSERT_OK(backend.CopyHostToDevice(*stream, segment->address, data.data(), data.size(), nullptr));
  ASSERT_OK(backend.Memset(*stream, segment->address + 32768, 0, 32768));
  // 100 rows of 37 bytes, from a pitch of 101 to one of 53, at odd offsets.
  ASSERT_OK(backend.CopyDeviceToDevice2D(*stream, kConformanceDevice, segment->address + 32769, 53,
                                         kConformanceDevice, segment->address + 3, 101, 37, 100));
  absl::StatusOr<std::vector<uint8_t>> back =
      this->ReadBack(*stream, segment->address + 32768, 32768);
  ASSERT_OK(back);
  std::vector<uint8_t> expected(32768, 0);
  for (int r = 0; r < 100; ++r) {
    std::copy_n(data.begin() + 3 + r * 101, 37, expected.begin() + 1 + r * 53);
  }
  EXPECT_TRUE(*back == expected);
  EXPECT_THAT(backend.CopyDeviceToDevice2D(*stream, kConformanceDevice, segment->address, 10,
                                           kConformanceDevice, segment->address + 40000, 64, 16, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.CopyDeviceToDevice2D(*stream, kConformanceDevice, segment->address + 60000,
                                           4096, kConformanceDevice, segment->address, 4096, 16, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// AccessOnHost: in place on a backend whose memory is host memory (the
// pointer sees what streams wrote and streams see what it wrote, and stays
// valid after the segment's release while the view lives); refused
// elsewhere, and for ranges outside a live segment.
TYPED_TEST_P(DeviceBackendConformanceTest, AccessOnHostIsInPlaceOrRefused) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  if (!backend.memory_on_host()) {
    EXPECT_THAT(backend.AccessOnHost(kConformanceDevice, segment->address, 64),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_OK(backend.ReleaseSegment(kConformanceDevice, segment->address));
    EXPECT_OK(backend.DestroyStream(*stream));
    return;
  }
  EXPECT_THAT(backend.AccessOnHost(kConformanceDevice, segment->address + segment->size - 8, 9),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(backend.AccessOnHost(DeviceIndex(backend.device_count()), segment->address, 8),
              StatusIs(absl::StatusCode::kInvalidArgument));
  const std::vector<uint8_t> written = NonZeroRandomBytes(5000, 41);
  ASSERT_OK(backend.CopyHostToDevice(*stream, segment->address + 7, written.data(), written.size(),
                                     nullptr));
  ASSERT_OK(backend.SynchronizeStream(*stream));
  absl::StatusOr<HostMemoryView> view =
      backend.AccessOnHost(kConformanceDevice, segment->address + 7, written.size());
  ASSERT_OK(view);
  EXPECT_TRUE(
      std::equal(written.begin(), written.end(), reinterpret_cast<const uint8_t*>(view->data)));
  const std::vector<uint8_t> mine = NonZeroRandomBytes(5000, 42);
  std::copy(mine.begin(), mine.end(), view->data);
  std::vector<uint8_t> read(mine.size());
  ASSERT_OK(
      backend.CopyDeviceToHost(*stream, read.data(), segment->address + 7, read.size(), nullptr));
  ASSERT_OK(backend.SynchronizeStream(*stream));
  EXPECT_EQ(read, mine);
  ASSERT_OK(backend.ReleaseSegment(kConformanceDevice, segment->address));
  EXPECT_THAT(backend.AccessOnHost(kConformanceDevice, segment->address, 8),
              StatusIs(absl::StatusCode::kInvalidArgument));
  view->data[0] = 1;  // still mapped while the view lives
  EXPECT_OK(backend.DestroyStream(*stream));
}

// HoldStream: where memory is host memory, the stream's later work waits
// for the hold's release, and `reached` comes once the work before it ran;
// refused elsewhere, and for an unknown stream.
TYPED_TEST_P(DeviceBackendConformanceTest, HoldStreamHoldsLaterWorkOrIsRefused) {
  DeviceBackend& backend = *this->backend_;
  absl::StatusOr<BackendStream> stream = backend.CreateStream(kConformanceDevice, 0);
  ASSERT_OK(stream);
  if (!backend.memory_on_host()) {
    EXPECT_THAT(backend.HoldStream(*stream, [] {}),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_OK(backend.DestroyStream(*stream));
    return;
  }
  EXPECT_THAT(backend.HoldStream(BackendStream(0xdead), [] {}),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<BackendSegment> segment =
      backend.AllocateSegment(kConformanceDevice, 2 * kConformanceMiB);
  ASSERT_OK(segment);
  auto reached = std::make_shared<std::atomic<bool>>(false);
  absl::StatusOr<StreamHold> hold = backend.HoldStream(*stream, [reached] { *reached = true; });
  ASSERT_OK(hold);
  EXPECT_TRUE(*reached);  // nothing was queued before it
  const std::vector<uint8_t> written = NonZeroRandomBytes(4096, 43);
  ASSERT_OK(
      backend.CopyHostToDevice(*stream, segment->address, written.data(), written.size(), nullptr));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_THAT(backend.QueryStream(*stream), IsOkAndHolds(false));
  absl::StatusOr<HostMemoryView> view =
      backend.AccessOnHost(kConformanceDevice, segment->address, written.size());
  ASSERT_OK(view);
  EXPECT_EQ(view->data[0], 0) << "the copy ran while the hold held the stream";
  hold->Release();
  ASSERT_OK(backend.SynchronizeStream(*stream));
  EXPECT_TRUE(
      std::equal(written.begin(), written.end(), reinterpret_cast<const uint8_t*>(view->data)));
  EXPECT_OK(backend.ReleaseSegment(kConformanceDevice, segment->address));
  EXPECT_OK(backend.DestroyStream(*stream));
}

REGISTER_TYPED_TEST_SUITE_P(
    DeviceBackendConformanceTest, DescribesEveryDevice, SegmentIsZeroAndSharedWithAnotherProcess,
    SegmentsDoNotOverlap, MoreThanFreeMemoryIsResourceExhausted, BadSizesAreInvalidArgument,
    ReleasedHandleCannotBeOpened, ReleasedAddressIsReused, FreeMemoryFollowsAllocations,
    ConcurrentAllocateAndReleaseFromTwoThreads, StreamsHavePrioritiesAndLifetimes,
    UnknownStreamsAndEventsAreNotFound, CopiesMoveRandomBytesOnEveryPath,
    WorkOutsideSegmentsIsInvalidArgument, MemsetWritesExactlyItsRange,
    FillRandomMatchesTheHostGenerator, BadRandomRequestsAreInvalidArgument,
    WorkOnOneStreamCompletesInOrder, StreamWaitEventOrdersWorkAcrossStreams,
    EventsQuerySynchronizeAndTime, ElapsedTimeNeedsTimingRecordedEvents,
    RecordingOnAnotherDevicesStreamIsInvalidArgument, InterprocessEventHandles,
    DestroyedStreamFinishesItsWork, SynchronizeDeviceWaitsForEveryStream, PinsAndUnpinsHostMemory,
    ReduceMatchesTheHostSteps, Copy2DMovesExactlyItsRows, AccessOnHostIsInPlaceOrRefused,
    HoldStreamHoldsLaterWorkOrIsRefused);

}  // namespace gpumux::testing
