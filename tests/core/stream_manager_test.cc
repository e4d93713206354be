// StreamManager over a HostBackend, without transport: per-session books,
// daemon-wide ids, default streams, limits, what ReleaseSession returns, and
// asynchronous errors.

#include "server/core/stream_manager.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpumux/common/sealed_memory.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::IsOkAndHolds;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

class StreamManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostBackend::Options options;
    options.device_count = 2;
    options.device_memory = uint64_t{16} << 20;
    absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(options);
    ASSERT_THAT(backend, IsOk());
    backend_ = *std::move(backend);
    streams_ = std::make_unique<StreamManager>(backend_.get());
    streams_->AddSession(kFirst);
    streams_->AddSession(kSecond);
  }
  void TearDown() override {
    streams_.reset();
    backend_.reset();
  }

  static constexpr SessionId kFirst{1};
  static constexpr SessionId kSecond{2};
  static constexpr DeviceIndex kDevice0{0};
  static constexpr DeviceIndex kDevice1{1};

  std::unique_ptr<HostBackend> backend_;
  std::unique_ptr<StreamManager> streams_;
};

TEST_F(StreamManagerTest, ReleaseSessionReturnsWhatItHeldWithoutDefaultStreams) {
  for (int i = 0; i < 3; ++i)
    ASSERT_THAT(streams_->CreateStream(kFirst, DeviceIndex(i % 2), 0), IsOk());
  ASSERT_THAT(streams_->CreateEvent(kFirst, kDevice0, EventFlags{}), IsOk());
  ASSERT_THAT(streams_->CreateEvent(kFirst, kDevice1, EventFlags{.interprocess = true}), IsOk());
  ASSERT_THAT(streams_->Resolve(kFirst, kDevice0, StreamId(0)), IsOk());  // a default stream
  ASSERT_THAT(streams_->CreateStream(kSecond, kDevice0, 0), IsOk());

  StreamCounts held = streams_->Counts(kFirst);
  EXPECT_EQ(held.streams, 3u);
  EXPECT_EQ(held.events, 2u);
  StreamCounts released = streams_->ReleaseSession(kFirst);
  EXPECT_EQ(released.streams, 3u);
  EXPECT_EQ(released.events, 2u);
  EXPECT_EQ(streams_->Counts(kFirst).streams, 0u);
  EXPECT_EQ(streams_->ReleaseSession(kFirst).streams, 0u) << "a second release finds nothing";
  EXPECT_EQ(streams_->Counts(kSecond).streams, 1u);

  EXPECT_THAT(streams_->Resolve(kFirst, kDevice0, StreamId(0)),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(streams_->CreateStream(kFirst, kDevice0, 0),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(streams_->CreateEvent(kFirst, kDevice0, EventFlags{}),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

// An asynchronous error (a queued group collective that failed) is reported
// by the session's next synchronize on its device, stream or event alike
// (and by one answered without waiting), once; other devices and sessions
// see nothing.
TEST_F(StreamManagerTest, ASynchronizeReportsTheSessionsAsyncErrorOnItsDeviceOnce) {
  streams_->NoteAsyncError(kFirst, kDevice0, absl::UnavailableError("peer rank 2 is unreachable"));
  EXPECT_THAT(streams_->SynchronizeStream(kFirst, kDevice1, StreamId(0)), IsOk());
  EXPECT_THAT(streams_->SynchronizeStream(kSecond, kDevice0, StreamId(0)), IsOk());
  EXPECT_THAT(streams_->QueryStream(kFirst, kDevice0, StreamId(0)), IsOk());  // queries do not
  EXPECT_THAT(streams_->TrySynchronizeStream(kFirst, kDevice0, StreamId(0)),
              StatusIs(absl::StatusCode::kUnavailable, "peer rank 2 is unreachable"));
  EXPECT_THAT(streams_->SynchronizeStream(kFirst, kDevice0, StreamId(0)), IsOk());

  absl::StatusOr<EventView> event = streams_->CreateEvent(kFirst, kDevice0, EventFlags{});
  ASSERT_THAT(event, IsOk());
  ASSERT_THAT(streams_->RecordEvent(kFirst, event->id, kDevice0, StreamId(0)), IsOk());
  streams_->NoteAsyncError(kFirst, kDevice0, absl::DeadlineExceededError("timed out"));
  streams_->NoteAsyncError(kFirst, kDevice0, absl::FailedPreconditionError("dropped"));
  streams_->NoteAsyncError(kFirst, kDevice0, absl::FailedPreconditionError("dropped"));
  EXPECT_THAT(streams_->SynchronizeEvent(kFirst, event->id),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       "timed out (2 more queued after it on this device failed too)"));
  EXPECT_THAT(streams_->TrySynchronizeEvent(kFirst, event->id), IsOkAndHolds(true));
}

TEST_F(StreamManagerTest, IdsAreUniqueAcrossSessionsAndPrivateToEach) {
  std::vector<uint64_t> stream_ids, event_ids;
  for (SessionId session : {kFirst, kSecond, kFirst, kSecond}) {
    absl::StatusOr<StreamManager::CreatedStream> stream =
        streams_->CreateStream(session, kDevice1, 0);
    ASSERT_THAT(stream, IsOk());
    stream_ids.push_back(stream->id.value());
    absl::StatusOr<EventView> event = streams_->CreateEvent(session, kDevice1, EventFlags{});
    ASSERT_THAT(event, IsOk());
    event_ids.push_back(event->id.value());
  }
  for (std::vector<uint64_t>* ids : {&stream_ids, &event_ids}) {
    std::sort(ids->begin(), ids->end());
    EXPECT_EQ(std::adjacent_find(ids->begin(), ids->end()), ids->end());
    EXPECT_EQ(std::count(ids->begin(), ids->end(), 0u), 0);
  }
  // The first ids went to kFirst: kSecond cannot name them.
  absl::StatusOr<StreamManager::CreatedStream> mine = streams_->CreateStream(kFirst, kDevice0, 0);
  absl::StatusOr<EventView> my_event = streams_->CreateEvent(kFirst, kDevice0, EventFlags{});
  ASSERT_THAT(mine, IsOk());
  ASSERT_THAT(my_event, IsOk());
  EXPECT_THAT(streams_->Resolve(kSecond, kDevice0, mine->id),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(streams_->DestroyStream(kSecond, kDevice0, mine->id),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(streams_->QueryEvent(kSecond, my_event->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(streams_->DestroyEvent(kSecond, my_event->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(streams_->Resolve(kFirst, kDevice0, mine->id), IsOk());
}

TEST_F(StreamManagerTest, DefaultStreamsArePerSessionAndDeviceAndCreatedOnce) {
  absl::StatusOr<ResolvedStream> a0 = streams_->Resolve(kFirst, kDevice0, StreamId(0));
  absl::StatusOr<ResolvedStream> a0_again = streams_->Resolve(kFirst, kDevice0, StreamId(0));
  absl::StatusOr<ResolvedStream> a1 = streams_->Resolve(kFirst, kDevice1, StreamId(0));
  absl::StatusOr<ResolvedStream> b0 = streams_->Resolve(kSecond, kDevice0, StreamId(0));
  ASSERT_THAT(a0, IsOk());
  ASSERT_THAT(a0_again, IsOk());
  ASSERT_THAT(a1, IsOk());
  ASSERT_THAT(b0, IsOk());
  EXPECT_EQ(a0->backend, a0_again->backend);
  EXPECT_NE(a0->backend, a1->backend);
  EXPECT_NE(a0->backend, b0->backend);
  EXPECT_EQ(a1->device, kDevice1);
  EXPECT_THAT(streams_->Resolve(kFirst, DeviceIndex(2), StreamId(0)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(StreamManagerTest, ConcurrentFirstUsesOfADefaultStreamAgreeOnOne) {
  constexpr int kThreads = 16;
  std::vector<BackendStream> seen(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<ResolvedStream> resolved = streams_->Resolve(kSecond, kDevice1, StreamId(0));
      if (resolved.ok()) seen[static_cast<size_t>(i)] = resolved->backend;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (BackendStream stream : seen) {
    EXPECT_NE(stream.value(), 0u);
    EXPECT_EQ(stream, seen[0]);
  }
  EXPECT_THAT(backend_->QueryStream(seen[0]), IsOk());
}

TEST_F(StreamManagerTest, PrioritiesAreClampedIntoTheDevicesRange) {
  absl::StatusOr<StreamManager::CreatedStream> low = streams_->CreateStream(kFirst, kDevice0, 7);
  absl::StatusOr<StreamManager::CreatedStream> high = streams_->CreateStream(kFirst, kDevice0, -99);
  ASSERT_THAT(low, IsOk());
  ASSERT_THAT(high, IsOk());
  EXPECT_EQ(low->priority, 0);
  EXPECT_EQ(high->priority, -5);
  EXPECT_THAT(streams_->CreateStream(kFirst, DeviceIndex(-1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(StreamManagerTest, EventsStopAtTheSessionLimit) {
  std::vector<EventId> events;
  for (size_t i = 0; i < StreamManager::kMaxEventsPerSession; ++i) {
    absl::StatusOr<EventView> event = streams_->CreateEvent(kFirst, kDevice0, EventFlags{});
    ASSERT_THAT(event, IsOk()) << i;
    events.push_back(event->id);
  }
  EXPECT_THAT(streams_->CreateEvent(kFirst, kDevice0, EventFlags{}),
              StatusIs(absl::StatusCode::kResourceExhausted));
  // Every way of adding an event counts against the limit.
  absl::StatusOr<EventView> shared =
      streams_->CreateEvent(kSecond, kDevice0, EventFlags{.interprocess = true});
  ASSERT_THAT(shared, IsOk());
  absl::StatusOr<std::string> handle = streams_->IpcHandle(kSecond, shared->id);
  ASSERT_THAT(handle, IsOk());
  EXPECT_THAT(streams_->OpenIpcHandle(kFirst, kDevice0, *handle),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(streams_->CreateEvent(kSecond, kDevice0, EventFlags{}), IsOk())
      << "the limit is per session";

  ASSERT_THAT(streams_->DestroyEvent(kFirst, events.back()), IsOk());
  EXPECT_THAT(streams_->OpenIpcHandle(kFirst, kDevice0, *handle), IsOk());
  EXPECT_EQ(streams_->ReleaseSession(kFirst).events, StreamManager::kMaxEventsPerSession);
}

TEST_F(StreamManagerTest, StreamsStopAtTheSessionLimit) {
  // Each host stream is a thread: 1024 of them take well under a second.
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < StreamManager::kMaxStreamsPerSession; ++i) {
    ASSERT_THAT(streams_->CreateStream(kFirst, DeviceIndex(static_cast<int>(i % 2)), 0), IsOk())
        << i;
  }
  EXPECT_THAT(streams_->CreateStream(kFirst, kDevice0, 0),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(streams_->CreateStream(kSecond, kDevice0, 0), IsOk()) << "the limit is per session";
  // Default streams do not count.
  EXPECT_THAT(streams_->Resolve(kFirst, kDevice1, StreamId(0)), IsOk());
  EXPECT_EQ(streams_->ReleaseSession(kFirst).streams, StreamManager::kMaxStreamsPerSession);
  RecordProperty("create_1024_streams_ms",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - start)
                                      .count()));
}

TEST_F(StreamManagerTest, DestroyRefusesTheDefaultStreamAndAnotherDevice) {
  absl::StatusOr<StreamManager::CreatedStream> stream = streams_->CreateStream(kFirst, kDevice1, 0);
  ASSERT_THAT(stream, IsOk());
  EXPECT_THAT(streams_->DestroyStream(kFirst, kDevice0, StreamId(0)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(streams_->DestroyStream(kFirst, kDevice0, stream->id),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(streams_->DestroyStream(kFirst, kDevice1, stream->id), IsOk());
  EXPECT_THAT(streams_->DestroyStream(kFirst, kDevice1, stream->id),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(streams_->Counts(kFirst).streams, 0u);
}

// Daemon-wide budgets: counted over every session, freed by destroys and
// session ends, and each refusal names its flag.
TEST_F(StreamManagerTest, DaemonWideLimitsCountEverySessionAndNameTheirFlag) {
  // Limits of 12: a tenant's share is 3, what each session here takes at
  // most. Other tenants fill the daemon but for 3 streams and 2 events.
  StreamManager limited(backend_.get(), StreamLimits{.max_streams = 12, .max_events = 12});
  constexpr int kFillerStreams[] = {3, 3, 3, 0}, kFillerEvents[] = {3, 3, 3, 1};
  for (int t = 0; t < 4; ++t) {
    const SessionId filler(100 + t);
    limited.AddSession(filler, absl::StrCat("filler-", t));
    for (int i = 0; i < kFillerStreams[t]; ++i)
      ASSERT_THAT(limited.CreateStream(filler, kDevice0, 0), IsOk());
    for (int i = 0; i < kFillerEvents[t]; ++i)
      ASSERT_THAT(limited.CreateEvent(filler, kDevice0, {}), IsOk());
  }
  limited.AddSession(kFirst, "first");
  limited.AddSession(kSecond, "second");
  ASSERT_THAT(limited.CreateStream(kFirst, kDevice0, 0), IsOk());
  ASSERT_THAT(limited.CreateStream(kFirst, kDevice1, 0), IsOk());
  absl::StatusOr<StreamManager::CreatedStream> third = limited.CreateStream(kSecond, kDevice0, 0);
  ASSERT_THAT(third, IsOk());
  EXPECT_THAT(
      limited.CreateStream(kSecond, kDevice0, 0),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("gpumuxd --max-streams=12")));
  ASSERT_THAT(limited.Resolve(kSecond, kDevice0, StreamId(0)), IsOk())
      << "default streams are not counted";
  ASSERT_THAT(limited.DestroyStream(kSecond, kDevice0, third->id), IsOk());
  ASSERT_THAT(limited.CreateStream(kSecond, kDevice0, 0), IsOk());

  ASSERT_THAT(limited.CreateEvent(kFirst, kDevice0, EventFlags{}), IsOk());
  ASSERT_THAT(limited.CreateEvent(kSecond, kDevice0, EventFlags{}), IsOk());
  EXPECT_THAT(limited.CreateEvent(kSecond, kDevice1, EventFlags{}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("gpumuxd --max-events=12")));
  limited.ReleaseSession(kFirst);  // its 2 streams and 1 event go back
  ASSERT_THAT(limited.CreateEvent(kSecond, kDevice1, EventFlags{}), IsOk());
  ASSERT_THAT(limited.CreateStream(kSecond, kDevice1, 0), IsOk());
  ASSERT_THAT(limited.CreateStream(kSecond, kDevice1, 0), IsOk());
  EXPECT_THAT(limited.CreateStream(kSecond, kDevice1, 0),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// A tenant holds at most a quarter of each daemon-wide budget, its sessions
// together; the sessions opened without a tenant count as one tenant.
TEST_F(StreamManagerTest, ATenantHoldsAQuarterOfTheStreamsAndEvents) {
  StreamManager limited(backend_.get(), StreamLimits{.max_streams = 8, .max_events = 8});
  const SessionId a1(11), a2(12), b(13), none1(14), none2(15);
  limited.AddSession(a1, "pod-a");
  limited.AddSession(a2, "pod-a");
  limited.AddSession(b, "pod-b");
  limited.AddSession(none1);
  limited.AddSession(none2);
  ASSERT_THAT(limited.CreateStream(a1, kDevice0, 0), IsOk());
  ASSERT_THAT(limited.CreateStream(a2, kDevice0, 0), IsOk());
  EXPECT_THAT(limited.CreateStream(a2, kDevice1, 0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("tenant 'pod-a' holds 2 streams, a tenant's share (a quarter of "
                                 "the daemon's 8)")));
  ASSERT_THAT(limited.CreateStream(b, kDevice0, 0), IsOk());
  ASSERT_THAT(limited.CreateStream(b, kDevice0, 0), IsOk());
  ASSERT_THAT(limited.CreateStream(none1, kDevice0, 0), IsOk());
  ASSERT_THAT(limited.CreateStream(none2, kDevice0, 0), IsOk());
  EXPECT_THAT(limited.CreateStream(none2, kDevice0, 0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("the sessions without a tenant hold 2 streams")));
  ASSERT_THAT(limited.CreateEvent(a1, kDevice0, {}), IsOk());
  ASSERT_THAT(limited.CreateEvent(a2, kDevice0, {}), IsOk());
  EXPECT_THAT(
      limited.CreateEvent(a2, kDevice0, {}),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("tenant 'pod-a' holds 2 events")));
  ASSERT_THAT(limited.CreateEvent(b, kDevice0, {}), IsOk());
  limited.ReleaseSession(a1);  // its stream and event go back to pod-a's share
  ASSERT_THAT(limited.CreateStream(a2, kDevice1, 0), IsOk());
  ASSERT_THAT(limited.CreateEvent(a2, kDevice0, {}), IsOk());
}

// Each interprocess event holds a memory file (host backend): a tenant holds
// at most a quarter of the daemon's memory-file budget in them, so that one
// tenant cannot take the descriptors every other one needs.
TEST_F(StreamManagerTest, ATenantHoldsAQuarterOfTheMemoryFileBudgetInInterprocessEvents) {
  const size_t budget = OpenMemoryFiles() + 40;
  SetMemoryFileBudget(budget, "the test's budget");
  const size_t share = TenantShares::ShareOf(budget);
  const SessionId a(21), b(22);
  streams_->AddSession(a, "pod-a");
  streams_->AddSession(b, "pod-b");
  std::vector<EventId> events;
  for (size_t i = 0; i < share; ++i) {
    absl::StatusOr<EventView> event = streams_->CreateEvent(a, kDevice0, {.interprocess = true});
    ASSERT_THAT(event, IsOk());
    events.push_back(event->id);
  }
  EXPECT_THAT(streams_->CreateEvent(a, kDevice0, {.interprocess = true}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat("tenant 'pod-a' holds ", share,
                                              " interprocess events, a tenant's share"))));
  EXPECT_THAT(streams_->CreateEvent(a, kDevice0, {}), IsOk()) << "other events are no memory file";
  EXPECT_THAT(streams_->CreateEvent(b, kDevice0, {.interprocess = true}), IsOk());
  ASSERT_THAT(streams_->DestroyEvent(a, events.back()), IsOk());
  EXPECT_THAT(streams_->CreateEvent(a, kDevice0, {.interprocess = true}), IsOk());
  streams_->ReleaseSession(a);
  streams_->ReleaseSession(b);
  SetMemoryFileBudget(std::numeric_limits<size_t>::max(), "");
}

}  // namespace
}  // namespace gpumux
