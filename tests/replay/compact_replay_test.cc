// The traces of testdata/ replayed in-process in PyTorch's expandable
// segments mode (which reaches PyTorch's own figures on the H200 exactly) and
// in gpumux's compact mode (reserved within 2% of requested at peak on every
// trace), and the variable-length workload's generator.

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

std::string TestData(const std::string& name) {
  return std::string(GPUMUX_SOURCE_DIR) + "/testdata/" + name;
}

ReplayResult ReplayWith(const std::string& trace, const std::string& conf) {
  absl::StatusOr<std::vector<TraceEvent>> events = LoadTrace(TestData(trace));
  EXPECT_OK(events);
  absl::StatusOr<AllocatorOptions> options = AllocatorOptions::Parse(conf);
  EXPECT_OK(options);
  if (!events.ok() || !options.ok()) return {};
  absl::StatusOr<std::unique_ptr<InProcessTarget>> target = InProcessTarget::Create(*options);
  EXPECT_OK(target);
  if (!target.ok()) return {};
  absl::StatusOr<ReplayResult> result = Replay(*events, **target);
  EXPECT_OK(result);
  return result.ok() ? *result : ReplayResult{};
}

double ReservedOverRequested(const ReplayResult& r) {
  return static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_requested);
}

constexpr char kResNet[] = "trace_resnet50_train_b64.csv.gz";
constexpr char kGpt2[] = "trace_gpt2s_train_b8_s1024.csv.gz";
constexpr char kVarlen[] = "trace_gpt2s_infer_varlen.csv.gz";

// PyTorch 2.11's expandable_segments on the H200 (../shared/traces/README.md):
// peak reserved 5,599,395,840 and 12,989,759,488 bytes, 90 and 129 maps.
TEST(CompactReplayTest, ExpandableSegmentsMatchPyTorchsExpandableReplayExactly) {
  const ReplayResult resnet = ReplayWith(kResNet, "expandable_segments:True");
  EXPECT_EQ(resnet.peak_requested, 5518937512);
  EXPECT_EQ(resnet.peak_allocated, 5518942208);
  EXPECT_EQ(resnet.peak_reserved, 5599395840);
  EXPECT_EQ(resnet.device_allocs, 90);
  const ReplayResult gpt2 = ReplayWith(kGpt2, "expandable_segments:True");
  EXPECT_EQ(gpt2.peak_requested, 12856116936);
  EXPECT_EQ(gpt2.peak_allocated, 12856130048);
  EXPECT_EQ(gpt2.peak_reserved, 12989759488);
  EXPECT_EQ(gpt2.device_allocs, 129);
}

TEST(CompactReplayTest, CompactModeStaysWithinTwoPercentOfRequestedOnEveryTrace) {
  for (const char* trace : {kResNet, kGpt2, kVarlen}) {
    SCOPED_TRACE(trace);
    const ReplayResult expandable = ReplayWith(trace, "expandable_segments:True");
    const ReplayResult compact = ReplayWith(trace, "compact_segments:True");
    // The same requests: PyTorch's rounding is unchanged.
    EXPECT_EQ(compact.peak_requested, expandable.peak_requested);
    EXPECT_LE(ReservedOverRequested(compact), 1.02);
    EXPECT_LT(compact.peak_reserved, expandable.peak_reserved);
  }
}

TEST(CompactReplayTest, VariableLengthWorkloadFragmentsPyTorchsDefaultMode) {
  absl::StatusOr<std::vector<TraceEvent>> events = LoadTrace(TestData(kVarlen));
  ASSERT_OK(events);
  EXPECT_EQ(events->size(), 82048u);  // 41,098 allocs; all but the 148 weights are freed
  const ReplayResult standard = ReplayWith(kVarlen, "");
  const ReplayResult expandable = ReplayWith(kVarlen, "expandable_segments:True");
  EXPECT_GT(ReservedOverRequested(standard), 1.5);
  EXPECT_LT(ReservedOverRequested(expandable), ReservedOverRequested(standard));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(CompactReplayTest, GeneratorRewritesTheCommittedWorkloadByteForByte) {
  const std::string out = ::testing::TempDir() + "/varlen.csv.gz";
  const std::string command = std::string("/usr/bin/python3 ") + GPUMUX_SOURCE_DIR +
                              "/scripts/gen-varlen-trace --out " + out;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const std::string committed = ReadFile(TestData(kVarlen));
  ASSERT_FALSE(committed.empty());
  EXPECT_TRUE(ReadFile(out) == committed)
      << "scripts/gen-varlen-trace no longer writes " << kVarlen << ": regenerate and commit it";
}

}  // namespace
}  // namespace gpumux
