// The stats page a local allocator publishes to the daemon: what the writer
// stores is what the reader copies, publication after publication, and a
// reader never trusts the page.

#include "common/ipc/stats_page.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<int64_t> ValuesOf(const DeviceStats& stats) {
  std::vector<int64_t> values(kStatsValues);
  std::memcpy(values.data(), &stats, sizeof(DeviceStats));
  return values;
}

DeviceStats StatsOf(const std::vector<int64_t>& values) {
  DeviceStats stats;
  std::memcpy(static_cast<void*>(&stats), values.data(), sizeof(DeviceStats));
  return stats;
}

// A zero-filled page, as the daemon's sealed memory file starts, aligned as
// the mapping is.
class StatsPageTest : public ::testing::Test {
 protected:
  static constexpr int kDevices = 3;
  StatsPageTest() {
    const size_t bytes = (StatsPageBytes(kDevices) + 63) / 64 * 64;
    page_ = std::aligned_alloc(64, bytes);
    std::memset(page_, 0, bytes);
    InitStatsPage(page_, kDevices);
  }
  ~StatsPageTest() override { std::free(page_); }
  void* page() { return page_; }
  StatsSlot* slots() {
    return reinterpret_cast<StatsSlot*>(static_cast<char*>(page_) + sizeof(StatsPageHeader));
  }

 private:
  void* page_;
};

TEST_F(StatsPageTest, ReadsEveryPublicationExactly) {
  absl::StatusOr<StatsPageWriter> writer =
      StatsPageWriter::Attach(page(), StatsPageBytes(kDevices), kDevices);
  ASSERT_OK(writer);
  StatsPageReader reader(page(), kDevices);
  // Never written: zeros.
  ASSERT_TRUE(reader.Read(1).has_value());
  EXPECT_EQ(ValuesOf(*reader.Read(1)), std::vector<int64_t>(kStatsValues, 0));

  std::vector<int64_t> values(kStatsValues);
  for (size_t i = 0; i < kStatsValues; ++i) values[i] = static_cast<int64_t>(i * 7919 + 1);
  writer->Publish(1, StatsOf(values));
  ASSERT_TRUE(reader.Read(1).has_value());
  EXPECT_EQ(ValuesOf(*reader.Read(1)), values);
  // Publications that change a few values, one value, none, and every one
  // (back to zero included): each reads back whole.
  for (int round = 0; round < 50; ++round) {
    const size_t changes = round % 5 == 4 ? kStatsValues : static_cast<size_t>(round % 4);
    for (size_t c = 0; c < changes; ++c) {
      const size_t i = (static_cast<size_t>(round) * 31 + c * 17) % kStatsValues;
      values[i] = round % 3 == 0 ? 0 : values[i] + round - 25;
    }
    writer->Publish(1, StatsOf(values));
    std::optional<DeviceStats> read = reader.Read(1);
    ASSERT_TRUE(read.has_value()) << round;
    ASSERT_EQ(ValuesOf(*read), values) << round;
  }
  // Other devices' slots are untouched.
  EXPECT_EQ(ValuesOf(*reader.Read(0)), std::vector<int64_t>(kStatsValues, 0));
  EXPECT_EQ(ValuesOf(*reader.Read(2)), std::vector<int64_t>(kStatsValues, 0));
  // A device out of range is ignored by the writer and refused by the reader.
  writer->Publish(kDevices, StatsOf(values));
  writer->Publish(-1, StatsOf(values));
  EXPECT_FALSE(reader.Read(kDevices).has_value());
  EXPECT_FALSE(reader.Read(-1).has_value());
}

TEST_F(StatsPageTest, APublicationWritesEveryValueOverWhatThePageHeld) {
  // A page with values in it (a writer before this one): a new writer's
  // publication replaces all of them, zeros included.
  for (size_t i = 0; i < kStatsValues; ++i)
    slots()[0].values[i].store(-5, std::memory_order_relaxed);
  absl::StatusOr<StatsPageWriter> writer =
      StatsPageWriter::Attach(page(), StatsPageBytes(kDevices), kDevices);
  ASSERT_OK(writer);
  std::vector<int64_t> values(kStatsValues, 0);
  values[3] = 42;
  writer->Publish(0, StatsOf(values));
  std::optional<DeviceStats> read = StatsPageReader(page(), kDevices).Read(0);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(ValuesOf(*read), values);
}

TEST_F(StatsPageTest, ReaderGivesUpOnASlotHeldOddAndOnABrokenHeader) {
  StatsPageReader reader(page(), kDevices);
  slots()[2].sequence.store(7, std::memory_order_relaxed);  // a writer that never finished
  EXPECT_FALSE(reader.Read(2).has_value());
  EXPECT_TRUE(reader.Read(1).has_value());
  reinterpret_cast<StatsPageHeader*>(page())->magic.store(0, std::memory_order_relaxed);
  EXPECT_FALSE(reader.Read(1).has_value());
}

TEST_F(StatsPageTest, AttachRefusesAPageThatDoesNotFit) {
  EXPECT_THAT(StatsPageWriter::Attach(page(), StatsPageBytes(kDevices) - 1, kDevices).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot hold 3 devices")));
  EXPECT_THAT(StatsPageWriter::Attach(page(), StatsPageBytes(kDevices), 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown header")));
  EXPECT_THAT(StatsPageWriter::Attach(page(), StatsPageBytes(kDevices), -1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpumux
