#include "client/free_batcher.h"

#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/base/request_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Records every batch the batcher sends.
class Recorder {
 public:
  FreeBatcher::SendFn Fn() {
    return [this](const FreeBatch& batch) {
      absl::MutexLock lock(&mu_);
      std::vector<uint64_t> values;
      for (AllocationId id : batch.ids) values.push_back(id.value());
      batches_.push_back(values);
      handles_.push_back(batch.wait_event_handles);
      return status_;
    };
  }
  std::vector<std::vector<uint64_t>> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  std::vector<std::vector<std::string>> handles() const {
    absl::MutexLock lock(&mu_);
    return handles_;
  }
  void set_status(absl::Status status) {
    absl::MutexLock lock(&mu_);
    status_ = status;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::vector<uint64_t>> batches_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> handles_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

std::vector<uint64_t> Values(const FreeBatch& batch) {
  std::vector<uint64_t> values;
  for (AllocationId id : batch.ids) values.push_back(id.value());
  return values;
}

TEST(FreeBatcherTest, TakeHandsOverEverythingQueued) {
  Recorder recorder;
  FreeBatcher batcher(recorder.Fn(), absl::InfiniteDuration());
  batcher.Enqueue(AllocationId(1));
  batcher.Enqueue(AllocationId(2));
  EXPECT_EQ(batcher.pending(), 2u);
  EXPECT_THAT(Values(batcher.Take()), ElementsAre(1, 2));
  EXPECT_EQ(batcher.pending(), 0u);
  EXPECT_THAT(Values(batcher.Take()), IsEmpty());
  EXPECT_OK(batcher.Stop());
  EXPECT_THAT(recorder.batches(), IsEmpty());
}

TEST(FreeBatcherTest, FlushSendsOneBatchAndNothingWhenEmpty) {
  Recorder recorder;
  FreeBatcher batcher(recorder.Fn(), absl::InfiniteDuration());
  EXPECT_OK(batcher.Flush());
  batcher.Enqueue(AllocationId(3));
  batcher.Enqueue(AllocationId(4));
  EXPECT_OK(batcher.Flush());
  EXPECT_THAT(recorder.batches(), ElementsAre(ElementsAre(3, 4)));
}

TEST(FreeBatcherTest, WaitEventHandlesTravelWithTheirBatchOnceEach) {
  Recorder recorder;
  FreeBatcher batcher(recorder.Fn(), absl::InfiniteDuration());
  const std::string fence_a(64, 'a');
  const std::string fence_b(64, 'b');
  EXPECT_TRUE(batcher.Enqueue(AllocationId(1), fence_a, DeviceIndex(0)));
  EXPECT_TRUE(batcher.Enqueue(AllocationId(2)));
  EXPECT_TRUE(batcher.Enqueue(AllocationId(3), fence_b, DeviceIndex(0)));
  EXPECT_TRUE(batcher.Enqueue(AllocationId(4), fence_a, DeviceIndex(0)));
  // A fence of another device waits for the next batch.
  EXPECT_FALSE(batcher.Enqueue(AllocationId(6), std::string(64, 'c'), DeviceIndex(1)));
  EXPECT_EQ(batcher.pending(), 4u);
  EXPECT_OK(batcher.Flush());
  EXPECT_TRUE(batcher.Enqueue(AllocationId(6), std::string(64, 'c'), DeviceIndex(1)));
  (void)batcher.Take();
  batcher.Enqueue(AllocationId(5));
  FreeBatch taken = batcher.Take();
  EXPECT_THAT(Values(taken), ElementsAre(5));
  EXPECT_THAT(taken.wait_event_handles, IsEmpty());
  EXPECT_THAT(recorder.batches(), ElementsAre(ElementsAre(1, 2, 3, 4)));
  EXPECT_THAT(recorder.handles(), ElementsAre(ElementsAre(fence_a, fence_b)));
}

TEST(FreeBatcherTest, FlushReturnsTheSendersStatus) {
  Recorder recorder;
  recorder.set_status(absl::NotFoundError("allocation 5 not found"));
  FreeBatcher batcher(recorder.Fn(), absl::InfiniteDuration());
  batcher.Enqueue(AllocationId(5));
  EXPECT_THAT(batcher.Flush(), StatusIs(absl::StatusCode::kNotFound, "allocation 5 not found"));
  // A failed batch is not retried.
  EXPECT_EQ(batcher.pending(), 0u);
}

TEST(FreeBatcherTest, BackgroundThreadSendsWithinTheDelay) {
  Recorder recorder;
  FreeBatcher batcher(recorder.Fn(), absl::Milliseconds(1));
  const absl::Time start = absl::Now();
  batcher.Enqueue(AllocationId(6));
  while (recorder.batches().empty() && absl::Now() - start < absl::Seconds(5)) {
    absl::SleepFor(absl::Microseconds(100));
  }
  EXPECT_THAT(recorder.batches(), ElementsAre(ElementsAre(6)));
  // Generous bound: the point is "soon", not a scheduler benchmark.
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
}

TEST(FreeBatcherTest, StopFlushesWhatIsQueued) {
  Recorder recorder;
  FreeBatcher batcher(recorder.Fn(), absl::InfiniteDuration());
  batcher.Enqueue(AllocationId(7));
  EXPECT_OK(batcher.Stop());
  EXPECT_THAT(recorder.batches(), ElementsAre(ElementsAre(7)));
  EXPECT_OK(batcher.Stop());  // idempotent
  EXPECT_THAT(recorder.batches(), ElementsAre(ElementsAre(7)));
}

TEST(FreeBatcherTest, TakeWaitsForASendInFlight) {
  absl::Notification sending;
  absl::Notification release;
  std::atomic<bool> send_done{false};
  FreeBatcher batcher(
      [&](const FreeBatch&) {
        sending.Notify();
        release.WaitForNotification();
        send_done = true;
        return absl::OkStatus();
      },
      absl::InfiniteDuration());
  batcher.Enqueue(AllocationId(8));
  std::thread flusher([&] { EXPECT_OK(batcher.Flush()); });
  sending.WaitForNotification();
  batcher.Enqueue(AllocationId(9));
  std::thread taker([&] {
    FreeBatch taken = batcher.Take();
    // The caller's own request must reach the daemon after the frees in flight.
    EXPECT_TRUE(send_done);
    EXPECT_THAT(Values(taken), ElementsAre(9));
  });
  absl::SleepFor(absl::Milliseconds(20));
  release.Notify();
  flusher.join();
  taker.join();
}

TEST(FreeBatcherTest, ConcurrentEnqueuersLoseNothing) {
  Recorder recorder;
  {
    FreeBatcher batcher(recorder.Fn(), absl::Microseconds(50));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&batcher, t] {
        for (int i = 0; i < 1000; ++i) batcher.Enqueue(AllocationId(t * 1000 + i));
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  size_t total = 0;
  for (const auto& batch : recorder.batches()) total += batch.size();
  EXPECT_EQ(total, 4000u);
}

// A batch stops at the daemon's bounds on one request
// (common/base/request_limits.h): the next free is refused, to go in the next one.
TEST(FreeBatcherTest, ABatchStopsAtTheRequestBounds) {
  Recorder recorder;
  FreeBatcher batcher(recorder.Fn(), absl::Hours(1));
  for (size_t i = 0; i < kMaxFreeIdsPerRequest; ++i)
    ASSERT_TRUE(batcher.Enqueue(AllocationId(i + 1)));
  EXPECT_FALSE(batcher.Enqueue(AllocationId(kMaxFreeIdsPerRequest + 1)));
  EXPECT_EQ(batcher.Take().ids.size(), kMaxFreeIdsPerRequest);

  for (size_t i = 0; i < kMaxWaitEventHandlesPerRequest; ++i) {
    ASSERT_TRUE(batcher.Enqueue(
        AllocationId(i + 1), std::string(64, static_cast<char>('a' + i % 26)) + std::to_string(i),
        DeviceIndex(0)));
  }
  EXPECT_TRUE(batcher.Enqueue(AllocationId(1000), std::string(64, 'a') + "0", DeviceIndex(0)))
      << "a handle already in the batch costs nothing";
  EXPECT_FALSE(batcher.Enqueue(AllocationId(1001), std::string(64, 'z') + "new", DeviceIndex(0)));
  FreeBatch batch = batcher.Take();
  EXPECT_EQ(batch.ids.size(), kMaxWaitEventHandlesPerRequest + 1);
  EXPECT_EQ(batch.wait_event_handles.size(), kMaxWaitEventHandlesPerRequest);
}

}  // namespace
}  // namespace gpumux
