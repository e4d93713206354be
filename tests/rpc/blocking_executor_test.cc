// BlockingExecutor: tasks keyed by session, at most a few running per key,
// so one key's blocked tasks never hold back another key's.

#include "server/rpc/blocking_executor.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

constexpr auto kPatience = absl::Seconds(10);

TEST(BlockingExecutorTest, BlockedTasksOfOneKeyDoNotHoldBackAnother) {
  // Before the executor, whose destructor runs the tasks still waiting,
  // which use them.
  absl::Notification release;
  std::atomic<int> started{0};
  absl::Notification other_ran;
  BlockingExecutor executor(/*max_running_per_key=*/2);
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(executor.Run(1, [&] {
      started.fetch_add(1);
      release.WaitForNotification();
    }));
  }
  ASSERT_OK(executor.Run(2, [&] { other_ran.Notify(); }));
  EXPECT_TRUE(other_ran.WaitForNotificationWithTimeout(kPatience));
  // Key 1's admitted tasks start in their own time; once both have, no
  // third may follow while they block.
  const absl::Time deadline = absl::Now() + kPatience;
  while (started.load() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(started.load(), 2) << "key 1 ran more (or fewer) than its limit at once";
  EXPECT_LE(executor.threads_for_test(), 3u);
  release.Notify();
}

TEST(BlockingExecutorTest, WaitingTasksRunInOrderAsTheirKeysTasksEnd) {
  std::vector<int> order;
  absl::Mutex mu;
  {
    BlockingExecutor executor(/*max_running_per_key=*/1);
    absl::Notification release;
    ASSERT_OK(executor.Run(7, [&] { release.WaitForNotification(); }));
    for (int i = 0; i < 5; ++i) {
      ASSERT_OK(executor.Run(7, [&, i] {
        absl::MutexLock lock(&mu);
        order.push_back(i);
      }));
    }
    release.Notify();
  }  // the destructor runs every task, waiting ones included
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(BlockingExecutorTest, ConcurrentTasksOfDifferentKeysRunTogether) {
  constexpr int kKeys = 50;
  std::atomic<int> running{0};
  absl::Notification all_running;
  absl::Notification release;
  BlockingExecutor executor(/*max_running_per_key=*/1);  // its tasks use the above
  for (int key = 0; key < kKeys; ++key) {
    ASSERT_OK(executor.Run(static_cast<uint64_t>(key), [&] {
      if (running.fetch_add(1) + 1 == kKeys) all_running.Notify();
      release.WaitForNotification();
    }));
  }
  EXPECT_TRUE(all_running.WaitForNotificationWithTimeout(kPatience));
  release.Notify();
}

// Threads are bounded daemon-wide: past max_threads tasks wait for a worker
// instead of each session's calls adding threads.
TEST(BlockingExecutorTest, ThreadsStayWithinTheBoundAndQueuedTasksStillRun) {
  BlockingExecutor executor(/*max_running_per_key=*/64, /*max_threads=*/3);
  absl::Notification release;
  std::atomic<int> ran{0};
  for (int key = 0; key < 20; ++key) {
    ASSERT_OK(executor.Run(static_cast<uint64_t>(key), [&] {
      release.WaitForNotification();
      ran.fetch_add(1);
    }));
  }
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(executor.threads_for_test(), 3u);
  EXPECT_EQ(ran.load(), 0);
  release.Notify();
  const absl::Time deadline = absl::Now() + kPatience;
  while (ran.load() < 20 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(ran.load(), 20);
  EXPECT_EQ(executor.threads_for_test(), 3u);
}

// After a burst the pool shrinks back: idle workers leave, and later tasks
// start new ones.
TEST(BlockingExecutorTest, IdleWorkersLeaveAndLaterTasksStillRun) {
  BlockingExecutor executor(/*max_running_per_key=*/64, /*max_threads=*/16,
                            /*idle_timeout=*/absl::Milliseconds(50));
  absl::Notification release;
  std::atomic<int> ran{0};
  for (int key = 0; key < 8; ++key) {
    ASSERT_OK(executor.Run(static_cast<uint64_t>(key), [&] {
      release.WaitForNotification();
      ran.fetch_add(1);
    }));
  }
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(executor.threads_for_test(), 8u);
  release.Notify();
  const absl::Time deadline = absl::Now() + kPatience;
  while (executor.threads_for_test() > 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(executor.threads_for_test(), 0u);
  EXPECT_EQ(ran.load(), 8);
  absl::Notification again;
  ASSERT_OK(executor.Run(1, [&] { again.Notify(); }));
  EXPECT_TRUE(again.WaitForNotificationWithTimeout(kPatience));
}

// The tasks waiting for their key's are bounded: 20,000 session-less
// Device.Synchronize calls from the observe port used to queue 446 MB.
TEST(BlockingExecutorTest, WaitingTasksAreBoundedPerKey) {
  absl::Notification release;
  std::atomic<int> ran{0};
  {
    BlockingExecutor executor(/*max_running_per_key=*/2, /*max_threads=*/8,
                              /*idle_timeout=*/absl::Seconds(2), /*max_waiting_per_key=*/8);
    auto blocked = [&] {
      release.WaitForNotification();
      ran.fetch_add(1);
    };
    // A session's key: 2 run, 8 wait, the 11th is refused.
    for (int i = 0; i < 10; ++i) ASSERT_OK(executor.Run(1, blocked));
    EXPECT_THAT(executor.Run(1, blocked),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         HasSubstr("this session's blocking calls: 2 run and 8 "
                                   "wait already, the most allowed")));
    // No session: a quarter as many may wait.
    for (int i = 0; i < 4; ++i) ASSERT_OK(executor.Run(blocked));
    EXPECT_THAT(executor.Run(blocked),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         HasSubstr("calls without a session: 2 run and 2 wait")));
    // Other keys are untouched.
    absl::Notification other;
    ASSERT_OK(executor.Run(2, [&] { other.Notify(); }));
    EXPECT_TRUE(other.WaitForNotificationWithTimeout(kPatience));
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 14);
}

}  // namespace
}  // namespace gpumux
