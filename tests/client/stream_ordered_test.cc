// Stream-ordered local allocation against a real daemon, with the client's
// own streams emulated on the host (HostLocalStreams) and lagging as a busy
// GPU does: a block freed on its stream is reused there at once; one other
// streams used is not reused before their work is done, which empty_cache
// and the OOM retry wait for; no free waits; memory never goes back to the
// daemon before the work that used it is done; and during a graph capture
// nothing is queried, waited for or leased.

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/host_local_streams.h"
#include "gpumux/memory.h"
#include "gpumux/observer.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;
constexpr DeviceIndex kDevice(0);
constexpr LocalStream kMain(7);
constexpr LocalStream kSide(8);
constexpr absl::Duration kLag = absl::Milliseconds(300);

class StreamOrderedTest : public DaemonClientTest {
 protected:
  StreamOrderedTest() : StreamOrderedTest(std::make_shared<HostLocalStreams>()) {}
  explicit StreamOrderedTest(std::shared_ptr<HostLocalStreams> streams)
      : DaemonClientTest({.daemon = {.devices = 1, .device_memory = 64 * kMiB},
                          .client = {.free_batch_delay = absl::InfiniteDuration(),
                                     .allocation = AllocationMode::kLocal,
                                     .local_streams = streams}}),
        streams_(std::move(streams)) {}

  absl::StatusOr<DeviceBuffer> AllocateOn(LocalStream stream, uint64_t size) {
    return memory::Allocate(client(), size, kDevice, {.local_stream = stream});
  }
  // The kernels that use `stream`'s memory now, done `lag` from now.
  void Busy(LocalStream stream, absl::Duration lag = kLag) {
    ASSERT_OK(streams_->EnqueueWork(kDevice, stream, lag));
  }
  // The daemon's books: the bytes leased to this session.
  int64_t ReservedAtDaemon() {
    Observer observer(daemon().address());
    absl::StatusOr<std::map<std::string, int64_t>> stats =
        observer.MemoryStats(kDevice, client().session_id());
    EXPECT_OK(stats);
    return stats.ok() ? stats->at("reserved_bytes.all.current") : -1;
  }

  std::shared_ptr<HostLocalStreams> streams_;
};

TEST_F(StreamOrderedTest, AFreedBlockIsReusedOnItsStreamAtOnce) {
  absl::StatusOr<DeviceBuffer> first = AllocateOn(kMain, kMiB);
  ASSERT_OK(first);
  const uint64_t address = first->address();
  Busy(kMain);
  memory::Release(client(), *std::move(first));
  const absl::Time start = absl::Now();
  absl::StatusOr<DeviceBuffer> again = AllocateOn(kMain, kMiB);
  ASSERT_OK(again);
  EXPECT_EQ(again->address(), address);
  EXPECT_LT(absl::Now() - start, kLag);
  EXPECT_FALSE(streams_->Idle(kDevice, kMain));  // its kernels still run
  EXPECT_EQ(streams_->synchronizations(), 0u);
  // Another stream has its own pool.
  absl::StatusOr<DeviceBuffer> other = AllocateOn(kSide, kMiB);
  ASSERT_OK(other);
  EXPECT_NE(other->address(), address);
}

TEST_F(StreamOrderedTest, ABlockAnotherStreamUsedWaitsForThatStreamsWork) {
  absl::StatusOr<DeviceBuffer> block = AllocateOn(kMain, kMiB);
  ASSERT_OK(block);
  const uint64_t address = block->address();
  ASSERT_OK(memory::RecordStream(client(), *block, kSide));
  Busy(kSide);
  const absl::Time freed = absl::Now();
  memory::Release(client(), *std::move(block));
  EXPECT_LT(absl::Now() - freed, kLag);  // the free did not wait
  EXPECT_EQ(streams_->synchronizations(), 0u);
  {
    absl::StatusOr<DeviceBuffer> meanwhile = AllocateOn(kMain, kMiB);
    ASSERT_OK(meanwhile);
    EXPECT_NE(meanwhile->address(), address);
  }
  absl::SleepFor(kLag - (absl::Now() - freed) + absl::Milliseconds(20));
  absl::StatusOr<DeviceBuffer> after = AllocateOn(kMain, kMiB);
  ASSERT_OK(after);
  EXPECT_EQ(after->address(), address);
  EXPECT_EQ(streams_->synchronizations(), 0u);
}

TEST_F(StreamOrderedTest, EmptyCacheWaitsForOtherStreamsAndForTheLeasesStream) {
  absl::StatusOr<DeviceBuffer> block = AllocateOn(kMain, 3 * kMiB);
  ASSERT_OK(block);
  ASSERT_OK(memory::RecordStream(client(), *block, kSide));
  Busy(kSide);
  Busy(kMain, kLag + absl::Milliseconds(100));
  memory::Release(client(), *std::move(block));
  const absl::Time start = absl::Now();
  absl::StatusOr<ReleasedCache> released = memory::EmptyCache(client());
  ASSERT_OK(released);
  // The lease went back, and only once the work that used it was done.
  EXPECT_EQ(released->released_bytes, 20 * kMiB);
  EXPECT_GE(absl::Now() - start, kLag);
  EXPECT_TRUE(streams_->Idle(kDevice, kSide));
  EXPECT_TRUE(streams_->Idle(kDevice, kMain));
  EXPECT_EQ(ReservedAtDaemon(), 0);
}

TEST_F(StreamOrderedTest, TheOutOfMemoryRetryWaitsForOtherStreamsAndSucceeds) {
  ASSERT_OK(memory::SetPerProcessMemoryFraction(client(), 0.5, kDevice));  // 32 MiB
  absl::StatusOr<DeviceBuffer> big = AllocateOn(kMain, 30 * kMiB);
  ASSERT_OK(big);
  ASSERT_OK(memory::RecordStream(client(), *big, kSide));
  Busy(kSide);
  memory::Release(client(), *std::move(big));
  // Its block waits for kSide; another stream's pool needs a segment of its
  // own, which fits only once the cached one went back.
  const absl::Time start = absl::Now();
  absl::StatusOr<DeviceBuffer> other = AllocateOn(LocalStream(9), 30 * kMiB);
  ASSERT_OK(other);
  EXPECT_GE(absl::Now() - start, kLag - absl::Milliseconds(20));
  EXPECT_TRUE(streams_->Idle(kDevice, kSide));
}

TEST_F(StreamOrderedTest, ALeaseGoesBackToTheDaemonOnlyAfterItsStreamsWork) {
  absl::StatusOr<DeviceBuffer> block = AllocateOn(kMain, kMiB);
  ASSERT_OK(block);
  ASSERT_EQ(ReservedAtDaemon(), 2 * kMiB);
  Busy(kMain);
  memory::Release(client(), *std::move(block));
  ASSERT_OK(memory::EmptyCache(client()));
  EXPECT_TRUE(streams_->Idle(kDevice, kMain));
  EXPECT_EQ(ReservedAtDaemon(), 0);
}

TEST_F(StreamOrderedTest, TheClientsEndWaitsForItsStreamsBeforeItsLeasesGoBack) {
  absl::StatusOr<DeviceBuffer> block = AllocateOn(kMain, kMiB);
  ASSERT_OK(block);
  Busy(kMain);
  memory::Release(client(), *std::move(block));
  const absl::Time start = absl::Now();
  DisconnectClient();
  EXPECT_GE(absl::Now() - start, kLag - absl::Milliseconds(20));
  EXPECT_TRUE(streams_->Idle(kDevice, kMain));
}

TEST_F(StreamOrderedTest, PressureFromAnotherSessionGetsALeaseOnlyAfterItsStreamsWork) {
  absl::StatusOr<DeviceBuffer> block = AllocateOn(kMain, 40 * kMiB);
  ASSERT_OK(block);
  Busy(kMain);
  memory::Release(client(), *std::move(block));  // cached: 40 MiB of the 64 leased
  std::unique_ptr<Client> other = ConnectAnother({.allocation = AllocationMode::kLocal});
  ASSERT_NE(other, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<DeviceBuffer> needs = memory::Allocate(*other, 40 * kMiB, kDevice);
  ASSERT_OK(needs);
  EXPECT_GE(absl::Now() - start, kLag - absl::Milliseconds(20));
  EXPECT_TRUE(streams_->Idle(kDevice, kMain));
}

TEST_F(StreamOrderedTest, DuringACaptureNothingIsQueriedWaitedForOrLeased) {
  // A block on a second stream, and cached blocks of the capturing stream.
  absl::StatusOr<DeviceBuffer> used = AllocateOn(kMain, kMiB);
  ASSERT_OK(used);
  const uint64_t used_address = used->address();
  ASSERT_OK(memory::RecordStream(client(), *used, kSide));
  Busy(kSide, absl::Milliseconds(1));
  { ASSERT_OK(AllocateOn(kMain, 2 * kMiB)); }

  streams_->BeginCapture(kDevice, kMain);
  const uint64_t queries = streams_->queries();
  // The cache serves it without a query.
  absl::StatusOr<DeviceBuffer> cached = AllocateOn(kMain, 2 * kMiB);
  ASSERT_OK(cached);
  // New memory cannot be leased during a capture.
  EXPECT_THAT(AllocateOn(kMain, 30 * kMiB),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("during CUDA graph capture on GPU 0 needs")));
  // A free that needs events waits for the capture's end.
  memory::Release(client(), *std::move(used));
  EXPECT_EQ(streams_->queries(), queries);
  EXPECT_EQ(streams_->capture_violations(), 0u);
  streams_->EndCapture(kDevice, kMain);

  absl::SleepFor(absl::Milliseconds(20));
  absl::StatusOr<DeviceBuffer> after = AllocateOn(kMain, kMiB);
  ASSERT_OK(after);
  EXPECT_EQ(after->address(), used_address);
  EXPECT_EQ(streams_->capture_violations(), 0u);
}

}  // namespace
}  // namespace gpumux::testing
