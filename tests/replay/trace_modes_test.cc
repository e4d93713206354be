// The replay check: each real PyTorch trace (testdata/) replayed
// through a client of a real daemon, in local and in daemon allocation mode,
// ends with all 122 memory_stats keys equal to the in-process replay's.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "gpumux/client.h"
#include "gtest/gtest.h"
#include "replay/client_target.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"
#include "tests/support/in_process_daemon.h"

namespace gpumux::testing {
namespace {

// Replays `events` through a client of `daemon` in local and in daemon
// allocation mode; each ends with `expected` for every key.
void ExpectBothModesReplayTo(const std::vector<TraceEvent>& events, const InProcessDaemon& daemon,
                             const std::map<std::string, int64_t>& expected) {
  for (AllocationMode mode : {AllocationMode::kLocal, AllocationMode::kDaemon}) {
    const char* name = mode == AllocationMode::kLocal ? "local" : "daemon";
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(daemon.address(), {.allocation = mode});
    ASSERT_TRUE(client.ok()) << client.status();
    ClientReplayTarget target(**client, DeviceIndex(0));
    absl::StatusOr<ReplayResult> result = Replay(events, target);
    ASSERT_TRUE(result.ok()) << name << ": " << result.status();
    absl::StatusOr<std::map<std::string, int64_t>> stats = target.Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_EQ(stats->size(), expected.size()) << name;
    for (const auto& [key, value] : expected) {
      EXPECT_EQ(stats->at(key), value) << name << " " << key;
    }
  }
}

class TraceModesTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TraceModesTest, EveryKeyEqualsTheInProcessReplayInBothModes) {
  absl::StatusOr<std::vector<TraceEvent>> events =
      LoadTrace(std::string(GPUMUX_SOURCE_DIR) + "/testdata/" + GetParam());
  ASSERT_TRUE(events.ok()) << events.status();
  absl::StatusOr<std::unique_ptr<InProcessTarget>> in_process = InProcessTarget::Create({});
  ASSERT_TRUE(in_process.ok()) << in_process.status();
  ASSERT_TRUE(Replay(*events, **in_process).ok());
  absl::StatusOr<std::map<std::string, int64_t>> expected = (*in_process)->Stats();
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(expected->size(), 122u);
  ASSERT_GT(expected->at("reserved_bytes.all.peak"), 0);

  // GPT-2 reserves 13 GB at its peak.
  InProcessDaemon daemon({.devices = 1, .device_memory = uint64_t{16} << 30});
  ExpectBothModesReplayTo(*events, daemon, *expected);
}

INSTANTIATE_TEST_SUITE_P(Traces, TraceModesTest,
                         ::testing::Values("trace_resnet50_train_b64.csv.gz",
                                           "trace_gpt2s_train_b8_s1024.csv.gz"));

// Compact mode through a daemon running it: the client's pages are mapped
// page by page, and both modes (a local-mode client allocates through the
// daemon under expandable segments) end with the in-process replay's keys.
class CompactTraceModesTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CompactTraceModesTest, EveryKeyEqualsTheInProcessCompactReplay) {
  constexpr char kConf[] = "compact_segments:True";
  absl::StatusOr<std::vector<TraceEvent>> events =
      LoadTrace(std::string(GPUMUX_SOURCE_DIR) + "/testdata/" + GetParam());
  ASSERT_TRUE(events.ok()) << events.status();
  absl::StatusOr<AllocatorOptions> options = AllocatorOptions::Parse(kConf);
  ASSERT_TRUE(options.ok()) << options.status();
  // A device of the same size on both sides: an expandable segment spans
  // 9/8 of it, and best fit counts the unmapped rest of it.
  constexpr uint64_t kDeviceMemory = uint64_t{8} << 30;
  absl::StatusOr<std::unique_ptr<InProcessTarget>> in_process =
      InProcessTarget::Create(*options, kDeviceMemory);
  ASSERT_TRUE(in_process.ok()) << in_process.status();
  ASSERT_TRUE(Replay(*events, **in_process).ok());
  absl::StatusOr<std::map<std::string, int64_t>> expected = (*in_process)->Stats();
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_GT(expected->at("num_device_free"), 0);  // compact mode unmapped pages on the way

  InProcessDaemon daemon({.devices = 1, .device_memory = kDeviceMemory, .allocator_conf = kConf});
  ExpectBothModesReplayTo(*events, daemon, *expected);
}

INSTANTIATE_TEST_SUITE_P(Traces, CompactTraceModesTest,
                         ::testing::Values("trace_resnet50_train_b64.csv.gz",
                                           "trace_gpt2s_infer_varlen.csv.gz"));

}  // namespace
}  // namespace gpumux::testing
