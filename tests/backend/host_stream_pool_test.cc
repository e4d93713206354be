// HostStreamPool with HostStream driven directly, with work items the test
// writes itself: which stream a worker takes next (priority, turns), that
// one stream's items never overlap, that streams share the workers up to the
// pool size, and that a parked wait gives its worker back.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_event.h"
#include "server/backend/host/host_stream.h"
#include "server/backend/host/host_stream_pool.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;

constexpr DeviceIndex kDev0(0);

// What the items ran, in the order they ran.
class Trace {
 public:
  HostStream::Work Add(std::string name) {
    return [this, name = std::move(name)] {
      absl::MutexLock lock(&mu_);
      names_.push_back(name);
    };
  }
  std::vector<std::string> names() {
    absl::MutexLock lock(&mu_);
    return names_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
};

// True once every stream in `streams` ran all it was given, polling for at
// most `limit`.
bool DrainWithin(const std::vector<std::shared_ptr<HostStream>>& streams, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    if (std::all_of(streams.begin(), streams.end(), [](const auto& s) { return s->Query(); })) {
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

class HostStreamPoolTest : public ::testing::Test {
 protected:
  // The pool goes last: it may only be destroyed once every stream drained.
  void TearDown() override {
    for (const auto& stream : streams_) stream->Synchronize();
  }

  std::shared_ptr<HostStream> Stream(HostStreamPool& pool, int priority = 0) {
    streams_.push_back(HostStream::Create(pool, kDev0, priority));
    return streams_.back();
  }
  // Occupies one of `pool`'s workers until the returned notification is
  // notified; returns once the worker is inside the item.
  std::unique_ptr<absl::Notification> Block(HostStreamPool& pool) {
    auto release = std::make_unique<absl::Notification>();
    // Shared: Notify may still be returning when the wait below has ended.
    auto started = std::make_shared<absl::Notification>();
    EXPECT_OK(Stream(pool)->Enqueue([started, release = release.get()] {
      started->Notify();
      release->WaitForNotification();
    }));
    started->WaitForNotification();
    return release;
  }

  std::atomic<bool> give_up_{false};
  std::vector<std::shared_ptr<HostStream>> streams_;
};

TEST_F(HostStreamPoolTest, AWorkerTakesTheHighestPriorityReadyStreamFirst) {
  HostStreamPool pool(1, &give_up_);
  std::unique_ptr<absl::Notification> release = Block(pool);
  // Queued in the reverse of the order they should run in, while the only
  // worker is busy: all are ready when it comes back.
  Trace trace;
  std::shared_ptr<HostStream> low = Stream(pool, 0);
  std::shared_ptr<HostStream> middle = Stream(pool, -2);
  std::shared_ptr<HostStream> high = Stream(pool, -5);
  ASSERT_OK(low->Enqueue(trace.Add("low 1")));
  ASSERT_OK(low->Enqueue(trace.Add("low 2")));
  ASSERT_OK(middle->Enqueue(trace.Add("middle")));
  ASSERT_OK(high->Enqueue(trace.Add("high 1")));
  ASSERT_OK(high->Enqueue(trace.Add("high 2")));
  release->Notify();
  ASSERT_TRUE(DrainWithin(streams_, milliseconds(5000)));
  EXPECT_THAT(trace.names(), ElementsAre("high 1", "high 2", "middle", "low 1", "low 2"));
}

TEST_F(HostStreamPoolTest, StreamsOfEqualPriorityTakeTurnsItemByItem) {
  HostStreamPool pool(1, &give_up_);
  std::unique_ptr<absl::Notification> release = Block(pool);
  Trace trace;
  std::shared_ptr<HostStream> a = Stream(pool, -1);
  std::shared_ptr<HostStream> b = Stream(pool, -1);
  for (int i = 1; i <= 3; ++i) {
    ASSERT_OK(a->Enqueue(trace.Add("a" + std::to_string(i))));
    ASSERT_OK(b->Enqueue(trace.Add("b" + std::to_string(i))));
  }
  release->Notify();
  ASSERT_TRUE(DrainWithin(streams_, milliseconds(5000)));
  EXPECT_THAT(trace.names(), ElementsAre("a1", "b1", "a2", "b2", "a3", "b3"));
}

TEST_F(HostStreamPoolTest, OneStreamsItemsRunOneAtATimeInOrder) {
  HostStreamPool pool(4, &give_up_);
  std::shared_ptr<HostStream> stream = Stream(pool);
  // Other streams keep every worker looking for work meanwhile.
  std::vector<std::shared_ptr<HostStream>> others;
  for (int i = 0; i < 6; ++i) others.push_back(Stream(pool));
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::vector<int> order;  // written only by the stream's items, which never overlap
  constexpr int kItems = 2000;
  for (int i = 0; i < kItems; ++i) {
    ASSERT_OK(stream->Enqueue([&, i] {
      if (running.fetch_add(1) != 0) ++overlaps;
      order.push_back(i);
      running.fetch_sub(1);
    }));
    ASSERT_OK(others[i % others.size()]->Enqueue([] {}));
  }
  stream->Synchronize();
  EXPECT_EQ(overlaps, 0);
  ASSERT_EQ(order.size(), static_cast<size_t>(kItems));
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(order[i], i) << "item " << i << " ran out of order";
}

TEST_F(HostStreamPoolTest, StreamsRunConcurrentlyUpToThePoolSize) {
  constexpr int kWorkers = 3;
  HostStreamPool pool(kWorkers, &give_up_);
  EXPECT_EQ(pool.workers(), kWorkers);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  absl::Notification release;
  for (int i = 0; i < 2 * kWorkers; ++i) {
    ASSERT_OK(Stream(pool)->Enqueue([&] {
      const int now = running.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      release.WaitForNotification();
      running.fetch_sub(1);
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (running.load() < kWorkers && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(running.load(), kWorkers) << "streams did not run side by side on every worker";
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(most.load(), kWorkers) << "more streams ran at once than the pool has workers";
  release.Notify();
  EXPECT_TRUE(DrainWithin(streams_, milliseconds(5000)));
}

TEST_F(HostStreamPoolTest, AParkedWaitGivesItsWorkerBack) {
  // One worker, many streams waiting on a record that a stream queued after
  // them completes: with the worker held by a wait, nothing would move.
  HostStreamPool pool(1, &give_up_);
  auto event = std::make_shared<HostEvent>(kDev0, EventFlags{});
  const uint64_t generation = event->Record();
  Trace trace;
  for (int i = 0; i < 20; ++i) {
    std::shared_ptr<HostStream> waiter = Stream(pool);
    ASSERT_OK(waiter->EnqueueWait(event, generation));
    ASSERT_OK(waiter->Enqueue(trace.Add("after the wait")));
  }
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(trace.names().empty()) << "work ran before the record it waits for";
  std::shared_ptr<HostStream> producer = Stream(pool);
  ASSERT_OK(producer->Enqueue(trace.Add("producer")));
  ASSERT_OK(producer->Enqueue([event, generation] { event->Complete(generation); }));
  const bool drained = DrainWithin(streams_, milliseconds(5000));
  EXPECT_TRUE(drained) << "the waits held the only worker";
  if (!drained) event->Complete(generation);  // lets TearDown finish
  const std::vector<std::string> names = trace.names();
  ASSERT_EQ(names.size(), 21u);
  EXPECT_EQ(names.front(), "producer");
}

// EnqueueHold: `reached` once the items before it ran, the items after it
// only once the hold's record completes; on an idle stream at once, on the
// caller's thread; right behind another hold, on the thread that completed
// that one's record, before Complete returns.
TEST_F(HostStreamPoolTest, AHoldIsReachedInOrderAndHoldsWhatFollows) {
  HostStreamPool pool(2, &give_up_);
  std::shared_ptr<HostStream> stream = Stream(pool);
  Trace trace;
  auto first = std::make_shared<HostEvent>(kDev0, EventFlags{});
  const uint64_t first_generation = first->Record();
  std::thread::id first_reached_on;
  ASSERT_OK(stream->EnqueueHold([&] { first_reached_on = std::this_thread::get_id(); }, first,
                                first_generation));
  EXPECT_EQ(first_reached_on, std::this_thread::get_id()) << "an idle stream's hold is reached";

  auto second = std::make_shared<HostEvent>(kDev0, EventFlags{});
  const uint64_t second_generation = second->Record();
  std::atomic<bool> second_reached{false};
  std::thread::id second_reached_on;
  ASSERT_OK(stream->EnqueueHold(
      [&] {
        second_reached_on = std::this_thread::get_id();
        second_reached = true;
      },
      second, second_generation));
  ASSERT_OK(stream->Enqueue(trace.Add("after both")));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(second_reached) << "reached while the hold before it held the stream";
  EXPECT_FALSE(stream->Query());

  first->Complete(first_generation);
  EXPECT_TRUE(second_reached) << "not reached by the thread that released the hold before it";
  EXPECT_EQ(second_reached_on, std::this_thread::get_id());
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(trace.names().empty()) << "work after a hold ran before its release";

  second->Complete(second_generation);
  stream->Synchronize();
  EXPECT_THAT(trace.names(), ElementsAre("after both"));

  // Behind ordinary work: reached only once that work ran, on a worker.
  auto gate = std::make_shared<absl::Notification>();
  ASSERT_OK(stream->Enqueue([gate] { gate->WaitForNotification(); }));
  auto third = std::make_shared<HostEvent>(kDev0, EventFlags{});
  const uint64_t third_generation = third->Record();
  absl::Notification third_reached;
  ASSERT_OK(stream->EnqueueHold([&] { third_reached.Notify(); }, third, third_generation));
  EXPECT_FALSE(third_reached.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  gate->Notify();
  EXPECT_TRUE(third_reached.WaitForNotificationWithTimeout(absl::Seconds(5)));
  third->Complete(third_generation);
  stream->Synchronize();
}

TEST_F(HostStreamPoolTest, AWaitOnACompletedRecordDoesNotPark) {
  HostStreamPool pool(1, &give_up_);
  auto event = std::make_shared<HostEvent>(kDev0, EventFlags{});
  const uint64_t generation = event->Record();
  event->Complete(generation);
  Trace trace;
  std::shared_ptr<HostStream> stream = Stream(pool);
  ASSERT_OK(stream->EnqueueWait(event, generation));
  ASSERT_OK(stream->Enqueue(trace.Add("after")));
  stream->Synchronize();
  EXPECT_THAT(trace.names(), ElementsAre("after"));
  EXPECT_EQ(event.use_count(), 1) << "the finished wait still holds the event";
}

TEST_F(HostStreamPoolTest, AStoppedStreamRefusesWorkAndFinishesWhatItHas) {
  HostStreamPool pool(1, &give_up_);
  std::unique_ptr<absl::Notification> release = Block(pool);
  Trace trace;
  std::shared_ptr<HostStream> stream = Stream(pool);
  ASSERT_OK(stream->Enqueue(trace.Add("queued")));
  stream->Stop();
  EXPECT_THAT(stream->Enqueue(trace.Add("refused")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(stream->Finished());
  release->Notify();
  stream->Synchronize();
  EXPECT_TRUE(stream->Finished());
  EXPECT_THAT(trace.names(), ElementsAre("queued"));
}

}  // namespace
}  // namespace gpumux::testing
