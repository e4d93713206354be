// Replays a real PyTorch trace in-process and checks PyTorch's own figures.

#include "replay/trace_replay.h"

#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replay/inprocess_target.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

std::string TestData(const std::string& name) {
  return std::string(GPUMUX_SOURCE_DIR) + "/testdata/" + name;
}

// Writes `text` gzip-compressed to a temporary file and returns its path.
std::string WriteGzip(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  gzFile file = gzopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr);
  gzwrite(file, text.data(), static_cast<unsigned>(text.size()));
  gzclose(file);
  return path;
}

TEST(TraceReplayTest, ResNet50MatchesPyTorchsReplay) {
  absl::StatusOr<std::vector<TraceEvent>> events =
      LoadTrace(TestData("trace_resnet50_train_b64.csv.gz"));
  ASSERT_OK(events);
  EXPECT_EQ(events->size(), 3943u);  // 2052 allocs, 1891 frees of traced blocks
  absl::StatusOr<std::unique_ptr<InProcessTarget>> target = InProcessTarget::Create({});
  ASSERT_OK(target);
  absl::StatusOr<ReplayResult> result = Replay(*events, **target);
  ASSERT_OK(result);
  EXPECT_EQ(result->peak_requested, 5518937512);
  EXPECT_NEAR(result->peak_reserved, 6803161088, 6803161088 * 0.01);
  EXPECT_NEAR(result->peak_allocated, 5540962304, 5540962304 * 0.01);
  EXPECT_NEAR(result->device_allocs, 86, 2);
  EXPECT_EQ(result->operations, 3943);
}

TEST(TraceReplayTest, Gpt2SmallMatchesPyTorchsReplay) {
  absl::StatusOr<std::vector<TraceEvent>> events =
      LoadTrace(TestData("trace_gpt2s_train_b8_s1024.csv.gz"));
  ASSERT_OK(events);
  absl::StatusOr<std::unique_ptr<InProcessTarget>> target = InProcessTarget::Create({});
  ASSERT_OK(target);
  absl::StatusOr<ReplayResult> result = Replay(*events, **target);
  ASSERT_OK(result);
  EXPECT_EQ(result->peak_requested, 12856116936);
  EXPECT_NEAR(result->peak_reserved, 13061062656, 13061062656 * 0.01);
  EXPECT_NEAR(result->peak_allocated, 12864902144, 12864902144 * 0.01);
  EXPECT_NEAR(result->device_allocs, 132, 2);
}

TEST(TraceReplayTest, RepeatTimesMoreRoundsAndKeepsRoundOnesPeaks) {
  const std::string path =
      WriteGzip("repeat.csv.gz",
                "action,addr,size,stream\n"
                "free_completed,1,100,0\n"  // allocated before recording: dropped
                "alloc,4096,3000000,0\n"
                "alloc,8192,1000,0\n"
                "free_requested,4096,3000000,0\n"
                "free_completed,4096,3000000,0\n"
                "segment_alloc,4096,20971520,0\n");  // never freed: freed between rounds
  absl::StatusOr<std::vector<TraceEvent>> events = LoadTrace(path);
  ASSERT_OK(events);
  ASSERT_EQ(events->size(), 3u);
  auto target = InProcessTarget::Create({});
  ASSERT_OK(target);
  absl::StatusOr<ReplayResult> result = Replay(*events, **target, /*repeat=*/3);
  ASSERT_OK(result);
  EXPECT_EQ(result->operations, 9);
  EXPECT_EQ(result->peak_requested, 3001000);
  EXPECT_EQ(result->peak_allocated, 3000320 + 1024);  // 512-byte rounding
  EXPECT_EQ(result->peak_reserved, 20971520 + 2097152);
  EXPECT_EQ(result->device_allocs, 2);
}

TEST(TraceReplayTest, LoadTraceReportsMissingAndMalformedFiles) {
  EXPECT_THAT(LoadTrace(::testing::TempDir() + "/no-such-trace.csv.gz"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(LoadTrace(WriteGzip("header.csv.gz", "a,b,c\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(":1: expected the header")));
  EXPECT_THAT(LoadTrace(WriteGzip("fields.csv.gz", "action,addr,size,stream\nalloc,12,x,0\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(":2: expected")));
  EXPECT_THAT(LoadTrace(WriteGzip("action.csv.gz", "action,addr,size,stream\nmalloc,1,2,0\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown action \"malloc\"")));
}

TEST(TraceReplayTest, FormatEndsWithTheFourRequiredLines) {
  ReplayResult r;
  r.peak_requested = 1000;
  r.peak_allocated = 1024;
  r.peak_reserved = 2048;
  r.device_allocs = 3;
  r.operations = 500;
  r.seconds = 0.25;
  const std::vector<std::string> lines =
      absl::StrSplit(FormatReplayResult(r), '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 4u);
  const size_t n = lines.size();
  EXPECT_EQ(lines[n - 4], "peak_requested=1000");
  EXPECT_EQ(lines[n - 3], "peak_reserved=2048");
  EXPECT_EQ(lines[n - 2], "reserved_over_requested=2.0480");
  EXPECT_EQ(lines[n - 1], "ops_per_second=2000");
  EXPECT_THAT(FormatReplayResult(r), HasSubstr("device_allocs=3\n"));
  EXPECT_THAT(FormatReplayResult(r), HasSubstr("peak_allocated=1024\n"));
}

}  // namespace
}  // namespace gpumux
