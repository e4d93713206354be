// ListSessionOverviews: the session list joined from the registry, the
// streams and the memory books, without transport.

#include "server/core/session_overview.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/core/core_fixture.h"

namespace gpumux {
namespace {

using SessionOverviewTest = testing::CoreTest;

TEST_F(SessionOverviewTest, JoinsWhoEachSessionIsWithItsStreamsEventsAndMemory) {
  const SessionId busy = Open("busy");
  const SessionId idle = Open("idle");
  ASSERT_OK(streams_->CreateStream(busy, DeviceIndex(1), 0));
  ASSERT_OK(streams_->CreateStream(busy, DeviceIndex(0), 0));
  ASSERT_OK(streams_->CreateEvent(busy, DeviceIndex(0), EventFlags{}));
  Allocate(busy, DeviceIndex(1), 1 << 20);

  std::vector<SessionOverview> overviews = ListSessionOverviews(sessions_, *streams_, *memory_);
  ASSERT_EQ(overviews.size(), 2u);
  const SessionOverview* b = nullptr;
  const SessionOverview* i = nullptr;
  for (const SessionOverview& o : overviews) (o.info.id == busy ? b : i) = &o;
  ASSERT_NE(b, nullptr);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->info.id, idle);
  EXPECT_EQ(b->info.client_name, "busy");
  EXPECT_EQ(b->info.pid, 1234);
  EXPECT_EQ(b->counts.streams, 2u);
  EXPECT_EQ(b->counts.events, 1u);
  EXPECT_EQ(i->counts.streams, 0u);
  uint64_t busy_on_1 = 0;
  for (const SessionDeviceBooks& usage : b->devices) {
    if (usage.device == DeviceIndex(1)) busy_on_1 = usage.allocated_bytes;
  }
  EXPECT_GE(busy_on_1, uint64_t{1} << 20);
  for (const SessionDeviceBooks& usage : i->devices) EXPECT_EQ(usage.allocated_bytes, 0u);
}

TEST_F(SessionOverviewTest, EndedSessionsAreNotListed) {
  const SessionId gone = Open("gone");
  const SessionId stays = Open("stays");
  lifecycle_->Close(gone, SessionEndReason::kClosed, "client closed the session stream");
  std::vector<SessionOverview> overviews = ListSessionOverviews(sessions_, *streams_, *memory_);
  ASSERT_EQ(overviews.size(), 1u);
  EXPECT_EQ(overviews[0].info.id, stays);
}

}  // namespace
}  // namespace gpumux
