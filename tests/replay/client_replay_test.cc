// Replay through a real daemon (ClientReplayTarget over a Client, against the
// daemon in-process), in the allocation mode the environment names (ctest
// runs the suite with GPUMUX_ALLOCATION=local and =daemon): a trace ends with
// the in-process replay's figures, handles are the target's, and a trace's
// streams must exist in the daemon.

#include "replay/client_target.h"

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// One device of 512 MiB: the trace below peaks well under it.
class ClientReplayTest : public DaemonClientTest {
 protected:
  ClientReplayTest() : DaemonClientTest({.daemon = {.devices = 1, .device_memory = 512 * kMiB}}) {}
};

// 2,000 allocations and frees on stream 0, small and large blocks, at most 16
// live at a time; the same events for the same seed.
std::vector<TraceEvent> SyntheticTrace(uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<TraceEvent> events;
  std::vector<uint64_t> live;
  uint64_t next_address = 4096;
  while (events.size() < 2000) {
    if (live.size() == 16 || (!live.empty() && random() % 3 == 0)) {
      const size_t victim = random() % live.size();
      events.push_back({.action = TraceEvent::Action::kFree, .addr = live[victim]});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
      continue;
    }
    const uint64_t size = random() % 2 == 0 ? 1 + random() % kMiB : kMiB + random() % (8 * kMiB);
    events.push_back({.action = TraceEvent::Action::kAlloc, .addr = next_address, .size = size});
    live.push_back(next_address);
    next_address += 4096;
  }
  return events;
}

TEST_F(ClientReplayTest, ATraceThroughTheDaemonEndsWithTheInProcessFigures) {
  const std::vector<TraceEvent> events = SyntheticTrace(12);
  absl::StatusOr<std::unique_ptr<InProcessTarget>> in_process = InProcessTarget::Create({});
  ASSERT_OK(in_process);
  absl::StatusOr<ReplayResult> expected = Replay(events, **in_process);
  ASSERT_OK(expected);
  ASSERT_GT(expected->device_allocs, 2);

  ClientReplayTarget target(client(), DeviceIndex(0));
  absl::StatusOr<ReplayResult> through_daemon = Replay(events, target);
  ASSERT_OK(through_daemon);
  EXPECT_EQ(through_daemon->operations, expected->operations);
  EXPECT_EQ(through_daemon->peak_requested, expected->peak_requested);
  EXPECT_EQ(through_daemon->peak_allocated, expected->peak_allocated);
  EXPECT_EQ(through_daemon->peak_reserved, expected->peak_reserved);
  EXPECT_EQ(through_daemon->device_allocs, expected->device_allocs);
}

TEST_F(ClientReplayTest, HandlesAreLiveUntilFreedOnce) {
  ClientReplayTarget target(client(), DeviceIndex(0));
  absl::StatusOr<uint64_t> handle = target.Allocate(1000, 0);
  ASSERT_OK(handle);
  absl::StatusOr<std::map<std::string, int64_t>> stats = target.Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->at("allocated_bytes.all.current"), 1024);
  EXPECT_OK(target.Free(*handle));
  // The free is batched, as `del x` is; Stats sees it.
  stats = target.Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->at("allocated_bytes.all.current"), 0);
  EXPECT_THAT(target.Free(*handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(target.Free(12345), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ClientReplayTest, ATraceStreamMustExistInTheDaemon) {
  ClientReplayTarget target(client(), DeviceIndex(0));
  EXPECT_THAT(target.Allocate(1000, 77), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  absl::StatusOr<uint64_t> handle = target.Allocate(1000, stream->id().value());
  ASSERT_OK(handle);
  EXPECT_OK(target.Free(*handle));
}

}  // namespace
}  // namespace gpumux::testing
