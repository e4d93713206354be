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
  EXPECT_EQ(*nvtx.Push(s, 0, "outer"), 0);  // depth of the range started
  EXPECT_EQ(*nvtx.Push(s, 0, "inner"), 1);
  EXPECT_EQ(nvtx.OpenRanges(s, 0), (std::vector<std::string>{"outer", "inner"}));
  EXPECT_EQ(*nvtx.Pop(s, 0), 1);  // depth of the range ended
  EXPECT_EQ(*nvtx.Pop(s, 0), 0);
}

TEST(NvtxRangesTest, PopWithNothingOpenIsAnErrorNotACrash) {
  NvtxRanges nvtx;
  nvtx.AddSession(SessionId(1));
  EXPECT_THAT(nvtx.Pop(SessionId(1), 0), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(*nvtx.Push(SessionId(1), 0, "again"), 0);
}

TEST(NvtxRangesTest, RecordsMarksAndRangesWithTimes) {
  NvtxRanges nvtx;
  SessionId s(3);
  nvtx.AddSession(s);
  nvtx.AddSession(SessionId(4));
  ASSERT_OK(nvtx.Mark(s, 0, "start"));
  ASSERT_TRUE(nvtx.Push(s, 0, "step").ok());
  ASSERT_TRUE(nvtx.Pop(s, 0).ok());
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
  EXPECT_THAT(nvtx.Mark(s, 0, std::string(NvtxRanges::kMaxMessageBytes + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (size_t i = 0; i < NvtxRanges::kMaxDepth; ++i) ASSERT_TRUE(nvtx.Push(s, 0, "r").ok());
  EXPECT_THAT(nvtx.Push(s, 0, "one too many"), StatusIs(absl::StatusCode::kResourceExhausted));
  nvtx.RemoveSession(s);
  EXPECT_TRUE(nvtx.OpenRanges(s, 0).empty());
  // A call racing with the session's end keeps nothing.
  EXPECT_THAT(nvtx.Push(s, 0, "late"), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_TRUE(nvtx.Records(s).empty());
}

// PyTorch's ranges are thread-local: each thread nests its own, and a pop
// ends the innermost range of its own thread.
TEST(NvtxRangesTest, RangesNestPerThread) {
  NvtxRanges nvtx;
  const SessionId s(1);
  nvtx.AddSession(s);
  EXPECT_EQ(*nvtx.Push(s, 11, "a outer"), 0);
  EXPECT_EQ(*nvtx.Push(s, 22, "b outer"), 0);
  EXPECT_EQ(*nvtx.Push(s, 11, "a inner"), 1);
  ASSERT_OK(nvtx.Mark(s, 22, "b mark"));
  EXPECT_EQ(nvtx.OpenRanges(s, 11), (std::vector<std::string>{"a outer", "a inner"}));
  EXPECT_EQ(nvtx.OpenRanges(s, 22), (std::vector<std::string>{"b outer"}));
  EXPECT_EQ(*nvtx.Pop(s, 22), 0);
  EXPECT_THAT(nvtx.Pop(s, 22),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("no NVTX range is open on this thread")));
  EXPECT_EQ(*nvtx.Pop(s, 11), 1);
  EXPECT_EQ(*nvtx.Pop(s, 11), 0);
  std::vector<NvtxRecord> records = nvtx.Records(s);
  ASSERT_EQ(records.size(), 7u);  // the refused pop keeps nothing
  EXPECT_EQ(records[3].kind, NvtxRecord::Kind::kMark);
  EXPECT_EQ(records[3].thread, 22u);
  EXPECT_EQ(records[3].depth, 1);  // inside b's one range, not a's two
}

TEST(NvtxRangesTest, ThreadsOfASessionKeepABoundedNumberOfRangesOpen) {
  NvtxRanges nvtx;
  const SessionId s(1);
  nvtx.AddSession(s);
  for (size_t i = 0; i < NvtxRanges::kMaxOpenRanges; ++i) {
    ASSERT_TRUE(nvtx.Push(s, i / NvtxRanges::kMaxDepth, "r").ok());
  }
  EXPECT_THAT(nvtx.Push(s, 1000, "one more thread"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("at most 4096 NVTX ranges open")));
  ASSERT_TRUE(nvtx.Pop(s, 0).ok());
  EXPECT_EQ(*nvtx.Push(s, 1000, "now it fits"), 0);
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
  ASSERT_OK(nvtx.Mark(s, 0, "hello"));
  ASSERT_TRUE(nvtx.Push(s, 0, "outer").ok());
  ASSERT_TRUE(nvtx.Push(s, 0, "inner").ok());
  ASSERT_TRUE(nvtx.Pop(s, 0).ok());
  ASSERT_TRUE(nvtx.Push(s, 0, "second").ok());
  EXPECT_THAT(nvtx.Pop(SessionId(9), 0), StatusIs(absl::StatusCode::kUnauthenticated));
  nvtx.RemoveSession(s);
  EXPECT_THAT(sink.events,
              ::testing::ElementsAre("mark 3 hello", "start 3 outer #100", "start 3 inner #101",
                                     "end #101", "start 3 second #102", "end #102", "end #100"));
}

}  // namespace
}  // namespace gpumux
