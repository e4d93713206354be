// StatsPages alone: a session's page is read back as its client published
// it, figures no allocator could have count as none until the session ends,
// a client's reset does not take counters out of the device's figures, and
// an ended session's counters stay in them while their peaks never fall.

#include "server/core/stats_pages.h"

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "common/formats/memory_stats.h"
#include "common/ipc/stats_page.h"
#include "gpumux/common/sealed_memory.h"
#include "gtest/gtest.h"
#include "server/backend/memory_file_table.h"

namespace gpumux {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr SessionId kSession(7);
constexpr DeviceIndex kDevice(1);

// A client's figures while it holds `blocks` large-pool blocks of `bytes`
// in all, having allocated them and nothing else.
DeviceStats Holding(int64_t blocks, int64_t bytes) {
  DeviceStats stats;
  for (StatType type : {kAggregate, kLargePool}) {
    stats.allocation[type].Increase(blocks);
    stats.active[type].Increase(blocks);
    stats.allocated_bytes[type].Increase(bytes);
    stats.active_bytes[type].Increase(bytes);
    stats.requested_bytes[type].Increase(bytes);
  }
  return stats;
}

class StatsPagesTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<StatsPageInfo> info = pages_.GetOrCreate(kSession);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->device_count, 2);
    // The client's side: the page from the table, mapped writable.
    absl::StatusOr<std::shared_ptr<const SealedMemory>> file = files_.Find(info->key, kSession);
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<MemoryMapping> mapping = (*file)->Map();
    ASSERT_TRUE(mapping.ok()) << mapping.status();
    mapping_ = *std::move(mapping);
    absl::StatusOr<StatsPageWriter> writer =
        StatsPageWriter::Attach(mapping_.data(), info->size, 2);
    ASSERT_TRUE(writer.ok()) << writer.status();
    writer_.emplace(*std::move(writer));
  }

  void Publish(const DeviceStats& stats) { writer_->Publish(kDevice.value(), stats); }

  MemoryFileTable files_;
  StatsPages pages_{&files_, 2};
  MemoryMapping mapping_;
  std::optional<StatsPageWriter> writer_;
};

TEST_F(StatsPagesTest, ThePageIsReadAsItsClientPublishedIt) {
  EXPECT_TRUE(pages_.Has(kSession));
  EXPECT_FALSE(pages_.Has(SessionId(8)));
  EXPECT_EQ(files_.Find(pages_.GetOrCreate(kSession)->key, SessionId(8)).status().code(),
            absl::StatusCode::kPermissionDenied);
  Publish(Holding(2, 4 * kMiB));
  std::optional<StatsPageFigures> figures = pages_.Read(kSession, kDevice, 8 * kMiB);
  ASSERT_TRUE(figures.has_value());
  EXPECT_EQ(figures->session.allocated_bytes[kAggregate].current, 4 * kMiB);
  EXPECT_EQ(figures->session.allocation[kLargePool].allocated, 2);
  EXPECT_EQ(figures->device.allocated_bytes[kAggregate].current, 4 * kMiB);
  // The other device's slot holds nothing yet.
  std::optional<StatsPageFigures> other = pages_.Read(kSession, DeviceIndex(0), 0);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->session.allocation[kAggregate].allocated, 0);
  EXPECT_FALSE(pages_.Rejected(kSession));
}

TEST_F(StatsPagesTest, ImplausibleFiguresCountAsNoneUntilTheSessionEnds) {
  Publish(Holding(1, 16 * kMiB));  // more than the 8 MiB it holds
  EXPECT_FALSE(pages_.Read(kSession, kDevice, 8 * kMiB).has_value());
  EXPECT_TRUE(pages_.Rejected(kSession));
  Publish(Holding(1, 2 * kMiB));
  EXPECT_FALSE(pages_.Read(kSession, kDevice, 8 * kMiB).has_value());
  pages_.Remove(kSession);
  EXPECT_FALSE(pages_.Has(kSession));
}

TEST_F(StatsPagesTest, AResetDoesNotTakeCountersOutOfTheDevicesFigures) {
  DeviceStats stats = Holding(3, 3 * kMiB);
  Publish(stats);
  ASSERT_TRUE(pages_.Read(kSession, kDevice, 4 * kMiB).has_value());
  stats.ResetAccumulated();  // torch.cuda.reset_accumulated_memory_stats
  stats.allocation[kAggregate].Increase(1);
  stats.allocation[kLargePool].Increase(1);
  Publish(stats);
  std::optional<StatsPageFigures> figures = pages_.Read(kSession, kDevice, 4 * kMiB);
  ASSERT_TRUE(figures.has_value());
  EXPECT_EQ(figures->session.allocation[kAggregate].allocated, 1);
  EXPECT_EQ(figures->device.allocation[kAggregate].allocated, 4);
}

TEST_F(StatsPagesTest, AnEndedSessionsCountersStayAndPeaksNeverFall) {
  Publish(Holding(3, 3 * kMiB));
  std::optional<StatsPageFigures> figures = pages_.Read(kSession, kDevice, 4 * kMiB);
  ASSERT_TRUE(figures.has_value());
  const DeviceStats settled = pages_.Settle(kDevice, figures->device);
  EXPECT_EQ(settled.allocated_bytes[kAggregate].peak, 3 * kMiB);

  pages_.Remove(kSession);
  const DeviceStats after = pages_.Settle(kDevice, DeviceStats{});
  // Its counters stay; what it held counts as freed; the peak stays.
  EXPECT_EQ(after.allocation[kAggregate].allocated, 3);
  EXPECT_EQ(after.allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(after.allocated_bytes[kAggregate].freed, 3 * kMiB);
  EXPECT_EQ(after.allocated_bytes[kAggregate].peak, 3 * kMiB);
  // The other device saw nothing of it.
  EXPECT_EQ(pages_.Settle(DeviceIndex(0), DeviceStats{}).allocation[kAggregate].allocated, 0);
}

}  // namespace
}  // namespace gpumux
