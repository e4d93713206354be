// The host backend's streams on its worker pool (HostStreamPool): threads do
// not grow with streams, each stream keeps its order among many, waits park
// instead of holding workers (so more waiting streams than workers cannot
// deadlock), and destroyed streams, Synchronize(device), giving up
// interprocess waits and the destructor behave as with a thread per stream.

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "tests/backend/host_backend_test_util.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr DeviceIndex kDev0(0);
constexpr uint64_t kPage = 4096;

// Threads of this process now.
int ThreadCount() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

std::unique_ptr<HostBackend> MakeBackend(int stream_workers) {
  HostBackend::Options options = HostTestOptions();
  options.stream_workers = stream_workers;
  absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(options);
  EXPECT_OK(backend);
  return backend.ok() ? *std::move(backend) : nullptr;
}

class HostBackendPoolTest : public ::testing::Test {
 protected:
  void Start(int stream_workers) {
    backend_ = MakeBackend(stream_workers);
    ASSERT_NE(backend_, nullptr);
  }
  // A test whose streams deadlocked cannot destroy its backend (the
  // destructor would wait for them forever): it fails and leaks it instead.
  void TearDown() override {
    if (HasFailure() && !Drains(Streams(), absl::Seconds(1))) (void)backend_.release();
  }

  BackendStream Stream(int priority = 0) {
    absl::StatusOr<BackendStream> stream = backend_->CreateStream(kDev0, priority);
    EXPECT_OK(stream);
    if (stream.ok()) streams_.push_back(*stream);
    return stream.ok() ? *stream : BackendStream();
  }
  BackendEvent Event(EventFlags flags = {}) {
    absl::StatusOr<BackendEvent> event = backend_->CreateEvent(kDev0, flags);
    EXPECT_OK(event);
    return event.ok() ? *event : BackendEvent();
  }
  BackendSegment Segment(uint64_t size) {
    absl::StatusOr<BackendSegment> segment = backend_->AllocateSegment(kDev0, size);
    EXPECT_OK(segment);
    return segment.ok() ? *segment : BackendSegment{};
  }
  std::unique_ptr<Gate> MakeGate() {
    absl::StatusOr<std::unique_ptr<Gate>> gate = Gate::Create(*backend_, kDev0);
    EXPECT_OK(gate);
    return gate.ok() ? *std::move(gate) : nullptr;
  }
  const std::vector<BackendStream>& Streams() const { return streams_; }
  // True once every stream in `streams` (live or destroyed: a destroyed one
  // counts as drained) ran all it was given, polling for at most `limit`.
  bool Drains(const std::vector<BackendStream>& streams, absl::Duration limit) {
    if (backend_ == nullptr) return true;
    const absl::Time deadline = absl::Now() + limit;
    while (true) {
      bool idle = true;
      for (BackendStream stream : streams) {
        absl::StatusOr<bool> done = backend_->QueryStream(stream);
        if (done.ok() && !*done) idle = false;
      }
      if (idle) return true;
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  std::vector<uint8_t> Read(uint64_t address, uint64_t size) {
    std::vector<uint8_t> bytes(size);
    const BackendStream stream = Stream();
    EXPECT_OK(backend_->CopyDeviceToHost(stream, bytes.data(), address, size, nullptr));
    EXPECT_OK(backend_->SynchronizeStream(stream));
    return bytes;
  }

  // Expects page i of the `pages` pages from `address` to hold i + 1 in
  // every byte, as the tests' streams i write them.
  void ExpectNumberedPages(uint64_t address, int pages) {
    for (int i = 0; i < pages; ++i) {
      EXPECT_EQ(Read(address + static_cast<uint64_t>(i) * kPage, kPage),
                std::vector<uint8_t>(kPage, static_cast<uint8_t>(i + 1)))
          << "page " << i << " (of stream " << i << ")";
    }
  }
  void WaitersOutnumberingWorkersAllComplete(EventFlags flags);

  std::unique_ptr<HostBackend> backend_;
  std::vector<BackendStream> streams_;
};

TEST(HostBackendPoolOptionsTest, StreamWorkersMustBeOneTo256) {
  HostBackend::Options options = HostTestOptions();
  EXPECT_EQ(options.stream_workers, 8) << "the documented default";
  for (int workers : {0, -1, 257}) {
    options.stream_workers = workers;
    EXPECT_THAT(HostBackend::Create(options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stream_workers")))
        << workers;
  }
  for (int workers : {1, 256}) {
    options.stream_workers = workers;
    EXPECT_OK(HostBackend::Create(options)) << workers;
  }
}

TEST_F(HostBackendPoolTest, ThreadsStayWithinThePoolWithThousandsOfStreams) {
  constexpr int kWorkers = 8;
  constexpr int kStreams = 2000;
  const int before = ThreadCount();
  ASSERT_GT(before, 0);
  Start(kWorkers);
  const BackendSegment segment = Segment(kStreams * kPage);
  std::unique_ptr<Gate> gate = MakeGate();
  ASSERT_NE(gate, nullptr);
  int most = ThreadCount();
  for (int i = 0; i < kStreams; ++i) {
    const BackendStream stream = Stream(-(i % 6));
    const uint64_t page = segment.address + static_cast<uint64_t>(i) * kPage;
    // Work before, a parked wait, and work behind it.
    ASSERT_OK(backend_->Memset(stream, page, 1, kPage));
    ASSERT_OK(gate->HoldBack(stream));
    ASSERT_OK(backend_->Memset(stream, page, static_cast<uint8_t>(2 + i % 200), kPage));
    if (i % 100 == 0) most = std::max(most, ThreadCount());
  }
  most = std::max(most, ThreadCount());
  std::cout << "threads: " << before << " before the backend, at most " << most << " with "
            << kStreams << " streams on " << kWorkers << " workers\n";
  // The workers, the interprocess watcher, and slack for the test's own.
  EXPECT_LE(most, before + kWorkers + 1 + 2);
  gate->Open();
  ASSERT_OK(backend_->Synchronize(kDev0));
  for (int i = 0; i < kStreams; i += 37) {
    EXPECT_EQ(Read(segment.address + static_cast<uint64_t>(i) * kPage, kPage),
              std::vector<uint8_t>(kPage, static_cast<uint8_t>(2 + i % 200)))
        << "stream " << i;
  }
  EXPECT_LE(ThreadCount(), before + kWorkers + 1 + 2);
}

TEST_F(HostBackendPoolTest, EachOfManyStreamsKeepsItsOrder) {
  constexpr int kStreams = 300;
  constexpr int kRounds = 16;
  constexpr uint64_t kRead = 64;
  Start(4);
  const BackendSegment segment = Segment(kStreams * kPage);
  std::vector<BackendStream> streams;
  for (int s = 0; s < kStreams; ++s) streams.push_back(Stream(-(s % 6)));
  // Round-major, so every stream's items interleave with every other's.
  std::vector<uint8_t> seen(kStreams * kRounds * kRead, 0);
  for (int round = 0; round < kRounds; ++round) {
    for (int s = 0; s < kStreams; ++s) {
      const uint64_t page = segment.address + static_cast<uint64_t>(s) * kPage;
      ASSERT_OK(backend_->Memset(streams[s], page, static_cast<uint8_t>(round + 1), kPage));
      ASSERT_OK(backend_->CopyDeviceToHost(streams[s], &seen[(s * kRounds + round) * kRead], page,
                                           kRead, nullptr));
    }
  }
  ASSERT_OK(backend_->Synchronize(kDev0));
  for (int s = 0; s < kStreams; ++s) {
    for (int round = 0; round < kRounds; ++round) {
      const uint8_t* read = &seen[(s * kRounds + round) * kRead];
      ASSERT_EQ(std::vector<uint8_t>(read, read + kRead),
                std::vector<uint8_t>(kRead, static_cast<uint8_t>(round + 1)))
          << "stream " << s << " round " << round << " saw another round's memset";
    }
  }
}

// More streams than workers, each waiting on an event recorded on its own
// producer stream, whose work (and so the record) is held back until all the
// waits are queued. Were a wait to hold its worker, the waiters would take
// both workers and the producers could never run.
void HostBackendPoolTest::WaitersOutnumberingWorkersAllComplete(EventFlags flags) {
  constexpr int kPairs = 16;
  const BackendSegment from = Segment(kPairs * kPage);
  const BackendSegment to = Segment(kPairs * kPage);
  std::unique_ptr<Gate> gate = MakeGate();
  ASSERT_NE(gate, nullptr);
  std::vector<BackendStream> waiters;
  for (int i = 0; i < kPairs; ++i) {
    const BackendStream producer = Stream();
    const BackendStream waiter = Stream(-5);  // the waiters come first, when ready
    waiters.push_back(waiter);
    const BackendEvent written = Event(flags);
    const uint64_t offset = static_cast<uint64_t>(i) * kPage;
    ASSERT_OK(gate->HoldBack(producer));
    ASSERT_OK(
        backend_->Memset(producer, from.address + offset, static_cast<uint8_t>(i + 1), kPage));
    ASSERT_OK(backend_->RecordEvent(written, producer));
    ASSERT_OK(backend_->StreamWaitEvent(waiter, written));
    ASSERT_OK(backend_->CopyDeviceToDevice(waiter, kDev0, to.address + offset, kDev0,
                                           from.address + offset, kPage));
  }
  std::this_thread::sleep_for(milliseconds(20));
  for (BackendStream waiter : waiters) {
    EXPECT_THAT(backend_->QueryStream(waiter), IsOkAndHolds(false))
        << "a copy ran before its wait ended";
  }
  gate->Open();
  ASSERT_TRUE(Drains(Streams(), absl::Seconds(10)))
      << "the waiting streams held every worker (deadlock)";
  ExpectNumberedPages(to.address, kPairs);
}

TEST_F(HostBackendPoolTest, WaitersOnPlainEventsOutnumberingWorkersAllComplete) {
  Start(2);
  WaitersOutnumberingWorkersAllComplete(EventFlags{});
}

TEST_F(HostBackendPoolTest, WaitersOnInterprocessEventsOutnumberingWorkersAllComplete) {
  Start(2);
  EventFlags interprocess;
  interprocess.interprocess = true;
  WaitersOutnumberingWorkersAllComplete(interprocess);
}

TEST_F(HostBackendPoolTest, WaitsOnRecordsAnotherProcessCompletesEndByPolling) {
  // The records are made and completed through HostIpcEvent, as a client
  // would in its own process: no HostEvent waiter hears of it.
  constexpr int kWaiters = 12;
  Start(1);
  const BackendSegment segment = Segment(kWaiters * kPage);
  EventFlags interprocess;
  interprocess.interprocess = true;
  std::vector<std::unique_ptr<HostIpcEvent>> clients;
  std::vector<uint64_t> generations;
  for (int i = 0; i < kWaiters; ++i) {
    const BackendEvent event = Event(interprocess);
    absl::StatusOr<std::string> handle = backend_->GetIpcEventHandle(event);
    ASSERT_OK(handle);
    absl::StatusOr<std::unique_ptr<HostIpcEvent>> client = OpenBackendEvent(*backend_, *handle);
    ASSERT_OK(client);
    generations.push_back((*client)->Record());
    clients.push_back(*std::move(client));
    const BackendStream stream = Stream();
    ASSERT_OK(backend_->StreamWaitEvent(stream, event));
    ASSERT_OK(backend_->Memset(stream, segment.address + static_cast<uint64_t>(i) * kPage,
                               static_cast<uint8_t>(i + 1), kPage));
  }
  std::this_thread::sleep_for(milliseconds(30));
  for (BackendStream stream : Streams()) {
    EXPECT_THAT(backend_->QueryStream(stream), IsOkAndHolds(false)) << "a wait ended by itself";
  }
  // Completed in reverse: each ends its own stream's wait only.
  for (int i = kWaiters - 1; i >= 0; --i) {
    clients[i]->Complete(generations[i], 1);
    EXPECT_TRUE(Drains({Streams()[i]}, absl::Seconds(2))) << "waiter " << i;
  }
  ExpectNumberedPages(segment.address, kWaiters);
}

TEST_F(HostBackendPoolTest, DestroyedStreamsRunTheirWorkAndSynchronizeWaitsForThem) {
  constexpr int kStreams = 50;
  Start(1);
  const BackendSegment segment = Segment(kStreams * kPage);
  std::unique_ptr<Gate> gate = MakeGate();
  ASSERT_NE(gate, nullptr);
  for (int i = 0; i < kStreams; ++i) {
    const BackendStream stream = Stream();
    ASSERT_OK(gate->HoldBack(stream));
    ASSERT_OK(backend_->Memset(stream, segment.address + static_cast<uint64_t>(i) * kPage,
                               static_cast<uint8_t>(i + 1), kPage));
    ASSERT_OK(backend_->DestroyStream(stream));  // with its work held back: returns at once
  }
  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    EXPECT_OK(backend_->Synchronize(kDev0));
    synchronized = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(synchronized) << "Synchronize(device) ignored destroyed streams' work";
  gate->Open();
  waiter.join();
  ExpectNumberedPages(segment.address, kStreams);
}

TEST_F(HostBackendPoolTest, AbandoningInterprocessWaitsResumesParkedStreams) {
  Start(1);
  const BackendSegment segment = Segment(kPage);
  const BackendStream stuck = Stream();
  std::unique_ptr<Gate> never = MakeGate();
  ASSERT_NE(never, nullptr);
  ASSERT_OK(never->HoldBack(stuck));
  ASSERT_OK(backend_->Memset(stuck, segment.address, 0x7e, kPage));
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_THAT(backend_->QueryStream(stuck), IsOkAndHolds(false));
  backend_->AbandonInterprocessWaits();
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1), [&] { EXPECT_OK(backend_->SynchronizeStream(stuck)); },
      [&] { never->Open(); }))
      << "a parked interprocess wait outlived AbandonInterprocessWaits";
  EXPECT_EQ(Read(segment.address, kPage), std::vector<uint8_t>(kPage, 0x7e));
}

TEST(HostBackendPoolShutdownTest, DestructorRunsEveryParkedStreamsWorkOnOneWorker) {
  constexpr int kStreams = 20;
  std::unique_ptr<HostBackend> backend = MakeBackend(1);
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<BackendSegment> segment = backend->AllocateSegment(kDev0, kStreams * kPage);
  ASSERT_OK(segment);
  // Interprocess waits no process will complete, with a plain event's wait
  // chained behind each: all of it must run once the destructor gives up.
  absl::StatusOr<std::unique_ptr<Gate>> never = Gate::Create(*backend, kDev0);
  ASSERT_OK(never);
  std::vector<std::shared_ptr<std::vector<uint8_t>>> outs;
  for (int i = 0; i < kStreams; ++i) {
    absl::StatusOr<BackendStream> stuck = backend->CreateStream(kDev0, 0);
    absl::StatusOr<BackendStream> chained = backend->CreateStream(kDev0, -1);
    absl::StatusOr<BackendEvent> event = backend->CreateEvent(kDev0, EventFlags{});
    ASSERT_OK(stuck);
    ASSERT_OK(chained);
    ASSERT_OK(event);
    const uint64_t page = segment->address + static_cast<uint64_t>(i) * kPage;
    ASSERT_OK((*never)->HoldBack(*stuck));
    ASSERT_OK(backend->Memset(*stuck, page, static_cast<uint8_t>(i + 1), kPage));
    ASSERT_OK(backend->RecordEvent(*event, *stuck));
    ASSERT_OK(backend->StreamWaitEvent(*chained, *event));
    auto out = std::make_shared<std::vector<uint8_t>>(kPage, 0);
    ASSERT_OK(backend->CopyDeviceToHost(*chained, out->data(), page, kPage, out));
    outs.push_back(std::move(out));
    if (i % 2 == 0) {
      ASSERT_OK(backend->DestroyStream(*chained));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  backend.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(*outs[i], std::vector<uint8_t>(kPage, static_cast<uint8_t>(i + 1))) << "stream " << i;
    EXPECT_EQ(outs[i].use_count(), 1) << "the copy's keep_alive was not released";
  }
}

}  // namespace
}  // namespace gpumux::testing
