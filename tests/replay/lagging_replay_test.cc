// Stream-ordered local allocation, on the host backend: each real PyTorch
// trace (testdata/) replayed through a fresh client whose streams run every
// free's kernels late (HostLocalStreams, as `gpumux replay
// --emulate-gpu-lag` does) ends with exactly the in-process replay's
// figures, which are PyTorch's own on the H200, at every lag. A free's
// block goes back to its stream's pool at once, as in PyTorch; an
// allocator that waited for the GPU before reusing it would need more
// memory the further the GPU lagged.

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "gpumux/client.h"
#include "gpumux/host_local_streams.h"
#include "gtest/gtest.h"
#include "replay/client_target.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"
#include "tests/status_matchers.h"
#include "tests/support/in_process_daemon.h"

namespace gpumux::testing {
namespace {

struct Lag {
  const char* name;
  absl::Duration time;
  uint64_t operations = 0;
};

// The GPU's lag: none; 100 kernels behind the CPU; each free's kernels
// finishing 10 ms or 100 ms after it.
const Lag kLags[] = {{"none", absl::ZeroDuration()},
                     {"100ops", absl::ZeroDuration(), 100},
                     {"10ms", absl::Milliseconds(10)},
                     {"100ms", absl::Milliseconds(100)}};

void PrintTo(const Lag& lag, std::ostream* out) { *out << lag.name; }

class LaggingReplayTest : public ::testing::TestWithParam<std::tuple<const char*, Lag>> {};

TEST_P(LaggingReplayTest, EveryKeyEqualsTheInProcessReplay) {
  const auto& [trace, lag] = GetParam();
  absl::StatusOr<std::vector<TraceEvent>> events =
      LoadTrace(std::string(GPUMUX_SOURCE_DIR) + "/testdata/" + trace);
  ASSERT_OK(events);
  absl::StatusOr<std::unique_ptr<InProcessTarget>> in_process = InProcessTarget::Create({});
  ASSERT_OK(in_process);
  ASSERT_OK(Replay(*events, **in_process));
  absl::StatusOr<std::map<std::string, int64_t>> expected = (*in_process)->Stats();
  ASSERT_OK(expected);
  ASSERT_EQ(expected->size(), 122u);

  // GPT-2 reserves 13 GB at its peak.
  InProcessDaemon daemon({.devices = 1, .device_memory = uint64_t{16} << 30});
  auto streams = std::make_shared<HostLocalStreams>(
      HostLocalStreams::Options{.lag_operations = lag.operations});
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(
      daemon.address(), {.allocation = AllocationMode::kLocal, .local_streams = streams});
  ASSERT_OK(client);
  ClientReplayTarget target(**client, DeviceIndex(0), streams.get(), lag.time);
  absl::StatusOr<ReplayResult> result = Replay(*events, target);
  ASSERT_OK(result);
  absl::StatusOr<std::map<std::string, int64_t>> stats = target.Stats();
  ASSERT_OK(stats);
  for (const auto& [key, value] : *expected) EXPECT_EQ(stats->at(key), value) << key;
  // Nothing waited for the GPU on the way.
  EXPECT_EQ(streams->synchronizations(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Traces, LaggingReplayTest,
                         ::testing::Combine(::testing::Values("trace_resnet50_train_b64.csv.gz",
                                                              "trace_gpt2s_train_b8_s1024.csv.gz",
                                                              "trace_gpt2s_infer_varlen.csv.gz"),
                                            ::testing::ValuesIn(kLags)),
                         [](const auto& test) {
                           std::string trace = std::get<0>(test.param);
                           trace = trace.substr(6, trace.find('.') - 6);  // "resnet50_train_b64"
                           return trace + "_" + std::get<1>(test.param).name;
                         });

}  // namespace
}  // namespace gpumux::testing
