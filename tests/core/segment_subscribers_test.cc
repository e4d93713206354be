// SegmentSubscribers alone, over a SessionRegistry whose sinks record the
// notices: every session handed a segment is told once when it is released,
// and told of each unmapped page range while it lives.

#include "server/core/segment_subscribers.h"

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/notice_sink.h"
#include "server/core/session_registry.h"

namespace gpumux {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// (device, segment, offset, size) of a SegmentReleased notice.
using Notice = std::tuple<int32_t, uint64_t, uint64_t, uint64_t>;

class RecordingSink final : public NoticeSink {
 public:
  void SegmentReleased(DeviceIndex device, SegmentId segment, uint64_t offset,
                       uint64_t size) override {
    absl::MutexLock lock(&mu_);
    notices_.emplace_back(device.value(), segment.value(), offset, size);
  }
  void AskReleaseCached(uint64_t, DeviceIndex) override {}
  void AskLeaseBlocks(uint64_t) override {}
  void StartProfiling(uint64_t, uint64_t) override {}
  void StopProfiling(uint64_t) override {}
  void Terminate(SessionEndReason, absl::string_view) override {}

  std::vector<Notice> notices() const {
    absl::MutexLock lock(&mu_);
    return notices_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Notice> notices_ ABSL_GUARDED_BY(mu_);
};

constexpr DeviceIndex kDevice(1);
constexpr SegmentId kSegment(7);

class SegmentSubscribersTest : public ::testing::Test {
 protected:
  // An open session whose notices go to `sink`.
  SessionId Open(const std::shared_ptr<RecordingSink>& sink) {
    SessionRecord info;
    info.client_name = "test";
    absl::StatusOr<OpenedSession> opened = sessions_.Open(std::move(info), sink);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? opened->info.id : SessionId(0);
  }

  SessionRegistry sessions_;
  SegmentSubscribers subscribers_{&sessions_};
  std::shared_ptr<RecordingSink> a_ = std::make_shared<RecordingSink>();
  std::shared_ptr<RecordingSink> b_ = std::make_shared<RecordingSink>();
};

TEST_F(SegmentSubscribersTest, EverySessionHandedASegmentIsToldOnceWhenItIsReleased) {
  const SessionId a = Open(a_);
  const SessionId b = Open(b_);
  subscribers_.Subscribe(a, kDevice, kSegment);
  subscribers_.Subscribe(a, kDevice, kSegment);  // a second block of it
  subscribers_.Subscribe(b, kDevice, kSegment);
  subscribers_.SegmentReleased(kDevice, kSegment);
  EXPECT_THAT(a_->notices(), ElementsAre(Notice{1, 7, 0, 0}));
  EXPECT_THAT(b_->notices(), ElementsAre(Notice{1, 7, 0, 0}));
  // Forgotten: a segment id is never released twice, and no one is told again.
  subscribers_.SegmentReleased(kDevice, kSegment);
  EXPECT_THAT(a_->notices(), ElementsAre(Notice{1, 7, 0, 0}));
}

TEST_F(SegmentSubscribersTest, OnlyTheSubscribersOfThatSegmentOnThatDeviceAreTold) {
  const SessionId a = Open(a_);
  const SessionId b = Open(b_);
  subscribers_.Subscribe(a, kDevice, kSegment);
  subscribers_.Subscribe(b, DeviceIndex(0), kSegment);
  subscribers_.Subscribe(b, kDevice, SegmentId(8));
  subscribers_.SegmentReleased(kDevice, kSegment);
  EXPECT_THAT(a_->notices(), ElementsAre(Notice{1, 7, 0, 0}));
  EXPECT_THAT(b_->notices(), IsEmpty());
  subscribers_.SegmentReleased(kDevice, SegmentId(9));  // never handed out
  EXPECT_THAT(b_->notices(), IsEmpty());
}

TEST_F(SegmentSubscribersTest, UnmappedPagesAreToldAndTheSubscribersStay) {
  const SessionId a = Open(a_);
  subscribers_.Subscribe(a, kDevice, kSegment);
  subscribers_.PagesUnmapped(kDevice, kSegment, 2 << 20, 4 << 20);
  subscribers_.PagesUnmapped(kDevice, kSegment, 8 << 20, 2 << 20);
  subscribers_.SegmentReleased(kDevice, kSegment);
  EXPECT_THAT(a_->notices(), ElementsAre(Notice{1, 7, 2 << 20, 4 << 20},
                                         Notice{1, 7, 8 << 20, 2 << 20}, Notice{1, 7, 0, 0}));
}

TEST_F(SegmentSubscribersTest, ASessionClosedMeanwhileIsNotTold) {
  const SessionId a = Open(a_);
  const SessionId b = Open(b_);
  subscribers_.Subscribe(a, kDevice, kSegment);
  subscribers_.Subscribe(b, kDevice, kSegment);
  ASSERT_TRUE(sessions_.Close(a).has_value());
  subscribers_.SegmentReleased(kDevice, kSegment);
  EXPECT_THAT(a_->notices(), IsEmpty());
  EXPECT_THAT(b_->notices(), ElementsAre(Notice{1, 7, 0, 0}));
}

}  // namespace
}  // namespace gpumux
