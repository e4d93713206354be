#include "server/core/nvtx_ranges.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;

TEST(NvtxRangesTest, DepthsFollowPyTorch) {
  NvtxRanges nvtx;
  SessionId s(1);
  nvtx.AddSession(s);
  EXPECT_EQ(*nvtx.Push(s, "outer"), 0);  // depth of the range started
  EXPECT_EQ(*nvtx.Push(s, "inner"), 1);
  EXPECT_EQ(nvtx.OpenRanges(s), (std::vector<std::string>{"outer", "inner"}));
  EXPECT_EQ(*nvtx.Pop(s), 1);  // depth of the range ended
  EXPECT_EQ(*nvtx.Pop(s), 0);
}

TEST(NvtxRangesTest, PopWithNothingOpenIsAnErrorNotACrash) {
  NvtxRanges nvtx;
  nvtx.AddSession(SessionId(1));
  EXPECT_THAT(nvtx.Pop(SessionId(1)), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(*nvtx.Push(SessionId(1), "again"), 0);
}

TEST(NvtxRangesTest, RecordsMarksAndRangesWithTimes) {
  NvtxRanges nvtx;
  SessionId s(3);
  nvtx.AddSession(s);
  nvtx.AddSession(SessionId(4));
  ASSERT_OK(nvtx.Mark(s, "start"));
  ASSERT_TRUE(nvtx.Push(s, "step").ok());
  ASSERT_TRUE(nvtx.Pop(s).ok());
  std::vector<NvtxRecord> records = nvtx.Records(s);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].kind, NvtxRecord::Kind::kMark);
  EXPECT_EQ(records[2].kind, NvtxRecord::Kind::kPop);
  EXPECT_EQ(records[2].message, "step");
  EXPECT_LE(records[0].time, records[2].time);
  EXPECT_TRUE(nvtx.Records(SessionId(4)).empty());  // sessions are separate
}

TEST(NvtxRangesTest, BoundsMessagesAndDepth) {
  NvtxRanges nvtx;
  SessionId s(1);
  nvtx.AddSession(s);
  EXPECT_THAT(nvtx.Mark(s, std::string(NvtxRanges::kMaxMessageBytes + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (size_t i = 0; i < NvtxRanges::kMaxDepth; ++i) ASSERT_TRUE(nvtx.Push(s, "r").ok());
  EXPECT_THAT(nvtx.Push(s, "one too many"), StatusIs(absl::StatusCode::kResourceExhausted));
  nvtx.RemoveSession(s);
  EXPECT_TRUE(nvtx.OpenRanges(s).empty());
  // A call racing with the session's end keeps nothing.
  EXPECT_THAT(nvtx.Push(s, "late"), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_TRUE(nvtx.Records(s).empty());
}

// What a profiler would see: every mark, and start/end ranges matched by id.
class RecordingSink final : public NvtxSink {
 public:
  void Mark(SessionId session, absl::string_view message) override {
    events.push_back(absl::StrCat("mark ", session.value(), " ", message));
  }
  uint64_t RangeStart(SessionId session, absl::string_view message) override {
    events.push_back(absl::StrCat("start ", session.value(), " ", message, " #", next_id));
    return next_id++;
  }
  void RangeEnd(uint64_t range) override { events.push_back(absl::StrCat("end #", range)); }

  std::vector<std::string> events;
  uint64_t next_id = 100;
};

TEST(NvtxRangesTest, ForwardsToTheSinkAndEndsOpenRangesWithTheSession) {
  RecordingSink sink;
  NvtxRanges nvtx(&sink);
  const SessionId s(3);
  nvtx.AddSession(s);
  ASSERT_OK(nvtx.Mark(s, "hello"));
  ASSERT_TRUE(nvtx.Push(s, "outer").ok());
  ASSERT_TRUE(nvtx.Push(s, "inner").ok());
  ASSERT_TRUE(nvtx.Pop(s).ok());
  ASSERT_TRUE(nvtx.Push(s, "second").ok());
  EXPECT_THAT(nvtx.Pop(SessionId(9)), StatusIs(absl::StatusCode::kUnauthenticated));
  nvtx.RemoveSession(s);
  EXPECT_THAT(sink.events,
              ::testing::ElementsAre("mark 3 hello", "start 3 outer #100", "start 3 inner #101",
                                     "end #101", "start 3 second #102", "end #102", "end #100"));
}

}  // namespace
}  // namespace gpumux
