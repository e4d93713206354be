// AddressOnlyDevice, the in-process replay's device: it keeps the books the
// host backend keeps for an unbacked device (the same addresses, the same
// free memory, the same refusals) for any sequence of segment and
// expandable-segment calls, so a replay in-process and one through a daemon
// on the host backend see the same device.

#include "replay/address_only_device.h"

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr DeviceIndex kDevice(0);

TEST(AddressOnlyDeviceTest, KeepsTheHostBackendsBooksCallForCall) {
  constexpr uint64_t kMemory = 256 * kMiB;
  absl::StatusOr<std::unique_ptr<AddressOnlyDevice>> replay = AddressOnlyDevice::Create(kMemory);
  ASSERT_THAT(replay, IsOk());
  absl::StatusOr<std::unique_ptr<HostBackend>> host = HostBackend::Create(
      HostBackend::Options{.device_count = 1, .device_memory = kMemory, .backed = false});
  ASSERT_THAT(host, IsOk());
  SegmentSource& a = **replay;
  SegmentSource& b = **host;

  std::mt19937_64 random(7);
  std::vector<uint64_t> segments;
  struct Range {
    uint64_t address, page_size, pages;
    std::vector<bool> mapped;
  };
  std::vector<Range> ranges;
  int refused = 0;
  for (int step = 0; step < 4000; ++step) {
    const int what = static_cast<int>(random() % 6);
    if (what <= 1) {
      // Sizes from 512 bytes to 40 MiB, multiples of 512.
      const uint64_t size = 512 * (1 + random() % (80 * 2048));
      absl::StatusOr<BackendSegment> x = a.ObtainSegment(kDevice, size, StreamId(0), false);
      absl::StatusOr<BackendSegment> y = b.ObtainSegment(kDevice, size, StreamId(0), false);
      ASSERT_EQ(x.status().code(), y.status().code()) << "step " << step;
      if (x.ok()) {
        ASSERT_EQ(x->address, y->address) << "step " << step;
        segments.push_back(x->address);
      } else {
        ++refused;
      }
    } else if (what == 2 && !segments.empty()) {
      const size_t i = random() % segments.size();
      ASSERT_THAT(a.ReturnSegment(kDevice, segments[i]), IsOk());
      ASSERT_THAT(b.ReturnSegment(kDevice, segments[i]), IsOk());
      segments.erase(segments.begin() + static_cast<ptrdiff_t>(i));
    } else if (what == 3) {
      const uint64_t page_size = 2 * kMiB * (1 + random() % 2);
      const uint64_t pages = 1 + random() % 32;
      absl::StatusOr<BackendRange> x =
          a.ReserveRange(kDevice, pages * page_size, page_size, StreamId(0), false);
      absl::StatusOr<BackendRange> y =
          b.ReserveRange(kDevice, pages * page_size, page_size, StreamId(0), false);
      ASSERT_THAT(x, IsOk());
      ASSERT_THAT(y, IsOk());
      ASSERT_EQ(x->address, y->address) << "step " << step;
      ranges.push_back(Range{x->address, page_size, pages, std::vector<bool>(pages, false)});
    } else if (what == 4 && !ranges.empty()) {
      Range& range = ranges[random() % ranges.size()];
      const uint64_t page = random() % range.pages;
      const uint64_t address = range.address + page * range.page_size;
      const absl::Status x = range.mapped[page] ? a.UnmapPages(kDevice, address, range.page_size)
                                                : a.MapPages(kDevice, address, range.page_size);
      const absl::Status y = range.mapped[page] ? b.UnmapPages(kDevice, address, range.page_size)
                                                : b.MapPages(kDevice, address, range.page_size);
      ASSERT_EQ(x.code(), y.code()) << "step " << step << ": " << x << " / " << y;
      if (x.ok()) range.mapped[page] = !range.mapped[page];
    } else if (what == 5 && !ranges.empty()) {
      const size_t i = random() % ranges.size();
      ASSERT_THAT(a.ReleaseRange(kDevice, ranges[i].address), IsOk());
      ASSERT_THAT(b.ReleaseRange(kDevice, ranges[i].address), IsOk());
      ranges.erase(ranges.begin() + static_cast<ptrdiff_t>(i));
    }
    ASSERT_EQ(*a.FreeMemory(kDevice), *b.FreeMemory(kDevice)) << "step " << step;
  }
  // The sequence reached the device's limit, not only its easy middle.
  EXPECT_GT(refused, 0);
}

TEST(AddressOnlyDeviceTest, RefusesWhatTheHostBackendRefuses) {
  absl::StatusOr<std::unique_ptr<AddressOnlyDevice>> device = AddressOnlyDevice::Create(16 * kMiB);
  ASSERT_THAT(device, IsOk());
  EXPECT_THAT(AddressOnlyDevice::Create(kMiB), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*device)->ObtainSegment(DeviceIndex(1), 2 * kMiB, StreamId(0), false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*device)->ObtainSegment(kDevice, 100, StreamId(0), false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*device)->ObtainSegment(kDevice, 18 * kMiB, StreamId(0), false),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT((*device)->ReturnSegment(kDevice, 0x1000), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<BackendRange> range =
      (*device)->ReserveRange(kDevice, 8 * kMiB, 2 * kMiB, StreamId(0), false);
  ASSERT_THAT(range, IsOk());
  EXPECT_THAT((*device)->MapPages(kDevice, range->address + kMiB, 2 * kMiB),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*device)->UnmapPages(kDevice, range->address, 2 * kMiB),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT((*device)->MapPages(kDevice, range->address, 8 * kMiB), IsOk());
  EXPECT_EQ(*(*device)->FreeMemory(kDevice), 8 * kMiB);
  // Releasing the range gives its mapped pages back too.
  ASSERT_THAT((*device)->ReleaseRange(kDevice, range->address), IsOk());
  EXPECT_EQ(*(*device)->FreeMemory(kDevice), 16 * kMiB);
}

TEST(AddressOnlyDeviceTest, EventsCompleteWhenRecorded) {
  absl::StatusOr<std::unique_ptr<AddressOnlyDevice>> device = AddressOnlyDevice::Create(16 * kMiB);
  ASSERT_THAT(device, IsOk());
  absl::StatusOr<BackendEvent> event = (*device)->CreateEvent(kDevice, EventFlags{});
  ASSERT_THAT(event, IsOk());
  EXPECT_THAT((*device)->RecordEvent(*event, BackendStream(1)), IsOk());
  EXPECT_EQ(*(*device)->QueryEvent(*event), true);
  EXPECT_THAT((*device)->SynchronizeEvent(*event), IsOk());
  EXPECT_THAT((*device)->DestroyEvent(*event), IsOk());
  EXPECT_THAT((*device)->QueryEvent(*event), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace gpumux
