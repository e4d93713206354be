// The Stream service end to end over a real Unix socket: priorities, ids per
// session, ordering through events and streams, what a session's end
// releases, and blocking calls that must not starve the daemon (events:
// event_service_test.cc).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"
#include "tests/rpc/daemon_fixture.h"
#include "tests/rpc/grpc_status_matchers.h"
#include "tests/rpc/ipc_gate.h"
#include "tests/rpc/stream_calls.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

using StreamServiceTest = DaemonTest;

TEST_F(StreamServiceTest, PriorityRangeIsHoppers) {
  RawSession session(channel_, "range");
  for (int device : {0, 1}) {
    v1::GetPriorityRangeRequest request;
    request.set_device(device);
    v1::GetPriorityRangeResponse range;
    ASSERT_THAT(session.stream().GetPriorityRange(session.Context().get(), request, &range),
                GrpcIsOk());
    EXPECT_EQ(range.least(), 0);
    EXPECT_EQ(range.greatest(), -5);
  }
  v1::GetPriorityRangeRequest request;
  request.set_device(2);
  v1::GetPriorityRangeResponse range;
  EXPECT_THAT(session.stream().GetPriorityRange(session.Context().get(), request, &range),
              GrpcStatusIs(kInvalid));
}

TEST_F(StreamServiceTest, CallsNeedASession) {
  RawSession session(channel_, "auth");  // a live session the calls below do not name
  auto streams = v1::Stream::NewStub(channel_);
  auto events = v1::Event::NewStub(channel_);
  v1::StreamRequest sync;
  v1::SynchronizeStreamResponse synced;
  grpc::ClientContext sync_context;
  EXPECT_THAT(streams->Synchronize(&sync_context, sync, &synced),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED));
  v1::CreateEventRequest create;
  v1::CreateEventResponse created;
  grpc::ClientContext create_context;
  create_context.AddMetadata("gpumux-session", std::to_string(session.id()) + ":wrong");
  EXPECT_THAT(events->Create(&create_context, create, &created),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED));
}

TEST_F(StreamServiceTest, CreateClampsPriorityIntoTheRange) {
  RawSession session(channel_, "clamp");
  const std::pair<int, int> asked_got[] = {{7, 0}, {-99, -5}, {-3, -3}, {0, 0}};
  std::vector<uint64_t> ids;
  for (auto [asked, got] : asked_got) {
    v1::CreateStreamResponse created;
    ASSERT_THAT(CreateStream(session, 1, asked, &created), GrpcIsOk());
    EXPECT_EQ(created.priority(), got) << "asked " << asked;
    EXPECT_EQ(created.device(), 1);
    EXPECT_NE(created.stream(), 0u);
    ids.push_back(created.stream());
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "stream ids repeat";
  EXPECT_THAT(CreateStream(session, 2, 0, nullptr), GrpcStatusIs(kInvalid));
  EXPECT_THAT(CreateStream(session, -1, 0, nullptr), GrpcStatusIs(kInvalid));
}

TEST_F(StreamServiceTest, DefaultStreamWorksWithoutCreationAndCannotBeDestroyed) {
  RawSession session(channel_, "default");
  for (int device : {0, 1}) {
    EXPECT_TRUE(StreamDone(session, device, 0));
    EXPECT_THAT(SynchronizeStream(session, device, 0), GrpcIsOk());
    EXPECT_THAT(DestroyStream(session, device, 0),
                GrpcStatusIs(kInvalid, HasSubstr("default stream")));
  }
  EXPECT_THAT(QueryStream(session, 2, 0, nullptr), GrpcStatusIs(kInvalid));
}

TEST_F(StreamServiceTest, StreamNamedWithAnotherDeviceIsInvalidArgument) {
  RawSession session(channel_, "devices");
  const uint64_t on_one = NewStream(session, 1);
  EXPECT_THAT(QueryStream(session, 0, on_one, nullptr),
              GrpcStatusIs(kInvalid, HasSubstr("is on device 1")));
  EXPECT_THAT(SynchronizeStream(session, 0, on_one), GrpcStatusIs(kInvalid));
  EXPECT_THAT(DestroyStream(session, 0, on_one), GrpcStatusIs(kInvalid));
  // The failed destroy left it alone.
  EXPECT_TRUE(StreamDone(session, 1, on_one));
  EXPECT_THAT(DestroyStream(session, 1, on_one), GrpcIsOk());
}

TEST_F(StreamServiceTest, ForeignUnknownAndDestroyedStreamsAreNotFound) {
  RawSession mine(channel_, "mine");
  RawSession theirs(channel_, "theirs");
  const uint64_t foreign = NewStream(theirs, 0);
  const uint64_t event = NewEvent(mine, 0);
  for (uint64_t stream : {foreign, uint64_t{987654321}}) {
    EXPECT_THAT(QueryStream(mine, 0, stream, nullptr), GrpcStatusIs(kNotFound)) << stream;
    EXPECT_THAT(SynchronizeStream(mine, 0, stream), GrpcStatusIs(kNotFound)) << stream;
    EXPECT_THAT(DestroyStream(mine, 0, stream), GrpcStatusIs(kNotFound)) << stream;
    EXPECT_THAT(WaitEvent(mine, 0, stream, event), GrpcStatusIs(kNotFound)) << stream;
    EXPECT_THAT(RecordEvent(mine, event, 0, stream), GrpcStatusIs(kNotFound)) << stream;
    EXPECT_THAT(WaitStream(mine, Ref(0, 0), Ref(0, stream)), GrpcStatusIs(kNotFound)) << stream;
    EXPECT_THAT(mine.Allocate(0, 512, nullptr, false, stream), GrpcStatusIs(kNotFound)) << stream;
  }
  // The owner's stream survived the other session's attempts.
  EXPECT_TRUE(StreamDone(theirs, 0, foreign));
  EXPECT_THAT(DestroyStream(theirs, 0, foreign), GrpcIsOk());
  EXPECT_THAT(QueryStream(theirs, 0, foreign, nullptr), GrpcStatusIs(kNotFound));
  EXPECT_THAT(DestroyStream(theirs, 0, foreign), GrpcStatusIs(kNotFound));
}

TEST_F(StreamServiceTest, QueryIsFalseWhileWorkIsPendingAndTrueAfterSynchronize) {
  RawSession session(channel_, "query");
  const uint64_t stream = NewStream(session, 0);
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, stream);
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 48 << 20, &a, false, stream), GrpcIsOk());
  v1::MemsetRequest memset;
  memset.mutable_dst()->set_allocation_id(a.allocation_id());
  memset.set_size(a.requested_size());
  memset.set_value(7);
  memset.mutable_options()->set_stream(stream);
  v1::CopyResponse queued;
  ASSERT_THAT(session.copy().Memset(session.Context().get(), memset, &queued), GrpcIsOk());

  EXPECT_FALSE(StreamDone(session, 0, stream));
  EXPECT_TRUE(StreamDone(session, 0, 0))
      << "the default stream does not queue behind another stream";
  gate.Release();
  EXPECT_THAT(SynchronizeStream(session, 0, stream), GrpcIsOk());
  EXPECT_TRUE(StreamDone(session, 0, stream));
}

TEST_F(StreamServiceTest, DestroyedStreamStillRunsWhatWasQueued) {
  RawSession session(channel_, "destroy-pending");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(1, 4096, &a), GrpcIsOk());
  const uint64_t stream = NewStream(session, 1);
  IpcGate gate(session, socket_path(), /*device=*/1);
  gate.Block(session, 1, stream);
  v1::MemsetRequest memset;
  memset.mutable_dst()->set_allocation_id(a.allocation_id());
  memset.set_size(4096);
  memset.set_value(0x3C);
  memset.mutable_options()->set_stream(stream);
  memset.mutable_options()->set_completion_event(true);
  v1::CopyResponse queued;
  ASSERT_THAT(session.copy().Memset(session.Context().get(), memset, &queued), GrpcIsOk());
  ASSERT_THAT(DestroyStream(session, 1, stream), GrpcIsOk());
  EXPECT_THAT(QueryStream(session, 1, stream, nullptr), GrpcStatusIs(kNotFound));
  EXPECT_FALSE(EventDone(session, queued.event()));

  gate.Release();
  EXPECT_THAT(SynchronizeEvent(session, queued.event()), GrpcIsOk());
  v1::DeviceToHostRequest read;
  read.mutable_src()->set_allocation_id(a.allocation_id());
  read.set_inline_size(4096);
  v1::DeviceToHostResponse bytes;
  ASSERT_THAT(session.copy().DeviceToHost(session.Context().get(), read, &bytes), GrpcIsOk());
  EXPECT_EQ(bytes.data(), std::string(4096, '\x3C'));
}

TEST_F(StreamServiceTest, WaitEventHoldsLaterWorkUntilTheEventCompletes) {
  RawSession session(channel_, "wait-event");
  const uint64_t producer = NewStream(session, 0);
  const uint64_t consumer = NewStream(session, 1);  // events may cross devices
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, producer);
  const uint64_t event = NewEvent(session, 0);
  ASSERT_THAT(RecordEvent(session, event, 0, producer), GrpcIsOk());
  ASSERT_THAT(WaitEvent(session, 1, consumer, event), GrpcIsOk());

  EXPECT_FALSE(EventDone(session, event));
  EXPECT_FALSE(StreamDone(session, 1, consumer));
  gate.Release();
  EXPECT_THAT(SynchronizeStream(session, 1, consumer), GrpcIsOk());
  EXPECT_TRUE(EventDone(session, event));
  // The event completes inside the producer's last work item, which may not
  // have returned yet: the stream is done once synchronized, not before.
  EXPECT_THAT(SynchronizeStream(session, 0, producer), GrpcIsOk());
  EXPECT_TRUE(StreamDone(session, 0, producer));
}

TEST_F(StreamServiceTest, WaitOnANeverRecordedEventAddsNoWait) {
  RawSession session(channel_, "no-wait");
  const uint64_t stream = NewStream(session, 0);
  const uint64_t event = NewEvent(session, 0);
  ASSERT_THAT(WaitEvent(session, 0, stream, event), GrpcIsOk());
  EXPECT_TRUE(StreamDone(session, 0, stream));
  EXPECT_THAT(WaitEvent(session, 0, stream, 424242), GrpcStatusIs(kNotFound));
}

TEST_F(StreamServiceTest, WaitStreamOrdersAfterTheOtherStreamsWorkSoFar) {
  RawSession session(channel_, "wait-stream");
  const uint64_t blocked = NewStream(session, 0);
  const uint64_t same_device = NewStream(session, 0);
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, blocked);
  ASSERT_THAT(WaitStream(session, Ref(0, same_device), Ref(0, blocked)), GrpcIsOk());
  ASSERT_THAT(WaitStream(session, Ref(1, 0), Ref(0, blocked)), GrpcIsOk());  // across devices
  ASSERT_THAT(WaitStream(session, Ref(0, blocked), Ref(0, blocked)),
              GrpcIsOk());  // itself: a no-op

  EXPECT_FALSE(StreamDone(session, 0, same_device));
  EXPECT_FALSE(StreamDone(session, 1, 0));
  gate.Release();
  EXPECT_THAT(SynchronizeStream(session, 0, same_device), GrpcIsOk());
  EXPECT_THAT(SynchronizeStream(session, 1, 0), GrpcIsOk());
  EXPECT_THAT(SynchronizeStream(session, 0, blocked),
              GrpcIsOk());  // its last item may still be returning
  EXPECT_TRUE(StreamDone(session, 0, blocked));
  EXPECT_THAT(WaitStream(session, Ref(0, same_device), Ref(1, blocked)), GrpcStatusIs(kInvalid));
}

// Collects what the daemon logs, for checks of its one line per session end.
class CapturingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string Text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    text_.append(msg.payload.data(), msg.payload.size());
    text_ += '\n';
  }
  void flush_() override {}

 private:
  std::string text_;
};

// The default logger is swapped only while no daemon thread runs.
class SessionEndTest : public StreamServiceTest {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    sink_ = std::make_shared<CapturingSink>();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink_));
    StreamServiceTest::SetUp();
  }
  void TearDown() override {
    daemon_.reset();
    spdlog::set_default_logger(previous_);
  }

  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<CapturingSink> sink_;
};

const v1::SessionInfo* FindSession(const v1::ListSessionsResponse& list, uint64_t id) {
  for (const v1::SessionInfo& info : list.sessions()) {
    if (info.session_id() == id) return &info;
  }
  return nullptr;
}

TEST_F(SessionEndTest, ListSessionsCountsStreamsAndEventsUntilTheSessionEnds) {
  auto observe = v1::Observe::NewStub(channel_);
  auto list = [&] {
    v1::ListSessionsResponse response;
    grpc::ClientContext context;
    EXPECT_THAT(observe->ListSessions(&context, v1::ListSessionsRequest(), &response), GrpcIsOk());
    return response;
  };
  RawSession stays(channel_, "stays");
  std::string handle;
  auto leaving = std::make_unique<RawSession>(channel_, "leaving");
  const uint64_t leaving_id = leaving->id();
  for (int i = 0; i < 3; ++i) NewStream(*leaving, i % 2);
  NewStream(*leaving, 0);
  ASSERT_THAT(SynchronizeStream(*leaving, 1, 0), GrpcIsOk());  // a default stream: not counted
  const uint64_t shared = NewEvent(*leaving, 0, {.interprocess = true});
  NewEvent(*leaving, 1, {.enable_timing = true});
  ASSERT_THAT(GetIpcHandle(*leaving, shared, &handle), GrpcIsOk());
  ASSERT_THAT(OpenIpcHandle(*leaving, 0, handle, nullptr), GrpcIsOk());  // opened ones count too

  v1::ListSessionsResponse before = list();
  const v1::SessionInfo* info = FindSession(before, leaving_id);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->streams(), 4u);
  EXPECT_EQ(info->events(), 3u);
  const v1::SessionInfo* other = FindSession(before, stays.id());
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->streams(), 0u);
  EXPECT_EQ(other->events(), 0u);

  ASSERT_THAT(leaving->Close(), GrpcIsOk());
  leaving.reset();
  v1::ListSessionsResponse after = list();
  EXPECT_EQ(FindSession(after, leaving_id), nullptr);
  EXPECT_EQ(after.sessions_size(), 1);
  // Its interprocess event went with it.
  EXPECT_THAT(OpenIpcHandle(stays, 0, handle, nullptr), GrpcStatusIs(kNotFound));
  EXPECT_THAT(sink_->Text(), HasSubstr("session " + std::to_string(leaving_id) + " ended"));
  EXPECT_THAT(sink_->Text(), HasSubstr("4 streams, 3 events"));
}

TEST_F(StreamServiceTest, BlockedSynchronizeCallsDoNotStopTheDaemonServing) {
  constexpr int kCalls = 40;
  RawSession session(channel_, "blocked");
  IpcGate gates[2] = {IpcGate(session, socket_path(), 0), IpcGate(session, socket_path(), 1)};
  std::vector<uint64_t> streams;
  std::vector<uint64_t> events;
  for (int i = 0; i < kCalls; ++i) {
    streams.push_back(NewStream(session, i % 2));
    gates[i % 2].Block(session, i % 2, streams.back());
    events.push_back(NewEvent(session, i % 2));
    ASSERT_THAT(RecordEvent(session, events.back(), i % 2, streams.back()), GrpcIsOk());
  }
  std::atomic<int> returned{0};
  std::vector<grpc::Status> results(kCalls);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&, i] {
      const size_t at = static_cast<size_t>(i);
      // Half wait through Stream.Synchronize, half through Event.Synchronize.
      results[at] = i < kCalls / 2 ? SynchronizeStream(session, i % 2, streams[at])
                                   : SynchronizeEvent(session, events[at]);
      returned.fetch_add(1);
    });
  }
  // The daemon keeps answering other calls, this session's and others'.
  RawSession other(channel_, "other");
  for (int round = 0; round < 5; ++round) {
    EXPECT_THAT(session.Ping(2000), GrpcIsOk());
    EXPECT_THAT(other.Ping(2000), GrpcIsOk());
    EXPECT_THAT(other.Allocate(round % 2, 1 << 20, nullptr), GrpcIsOk());
    EXPECT_FALSE(StreamDone(session, 0, streams[0]));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(returned.load(), 0) << "a Synchronize returned before its stream's work ran";
  for (IpcGate& gate : gates) gate.Release();
  for (std::thread& caller : callers) caller.join();
  for (const grpc::Status& status : results) EXPECT_THAT(status, GrpcIsOk());
  EXPECT_TRUE(StreamDone(session, 0, streams[0]));
}

TEST_F(StreamServiceTest, OneSessionsBlockedCallsDoNotStallAnothersBlockingCalls) {
  // More blocked calls than the daemon would ever run at once for anyone.
  constexpr int kCalls = 300;
  RawSession hog(channel_, "hog");
  IpcGate gate(hog, socket_path());
  const uint64_t stream = NewStream(hog, 0);
  gate.Block(hog, 0, stream);
  std::vector<grpc::Status> results(kCalls);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back(
        [&, i] { results[static_cast<size_t>(i)] = SynchronizeStream(hog, 0, stream); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  // An inline read always blocks on the daemon's side.
  RawSession victim(channel_, "victim");
  v1::Allocation a;
  ASSERT_THAT(victim.Allocate(1, 4096, &a), GrpcIsOk());
  v1::DeviceToHostRequest read;
  read.mutable_src()->set_allocation_id(a.allocation_id());
  read.set_inline_size(16);
  v1::DeviceToHostResponse bytes;
  std::unique_ptr<grpc::ClientContext> context = victim.Context();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_THAT(victim.copy().DeviceToHost(context.get(), read, &bytes), GrpcIsOk());
  EXPECT_THAT(SynchronizeStream(victim, 1, 0), GrpcIsOk());

  gate.Release();
  for (std::thread& caller : callers) caller.join();
  for (const grpc::Status& status : results) EXPECT_THAT(status, GrpcIsOk());
}

// A Synchronize blocked on an interprocess event that a live but hung client
// never completes would keep its gRPC call open and grpc::Server::Shutdown
// waiting forever; Daemon::Shutdown makes the backend abandon such waits first.
TEST_F(StreamServiceTest, ShutdownDoesNotHangOnASynchronizeThatWaitsForAnotherProcess) {
  // The gate stands for a client process that recorded an event and hung
  // before its work completed it.
  auto session = std::make_unique<RawSession>(channel_, "hung-peer");
  IpcGate gate(*session, socket_path());
  const uint64_t stream = NewStream(*session, 0);
  gate.Block(*session, 0, stream);
  grpc::Status synchronized;
  std::thread caller([&] { synchronized = SynchronizeStream(*session, 0, stream); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    daemon_->Shutdown(/*deadline_ms=*/200);
    stopped.store(true);
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!stopped.load() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool stopped_in_time = stopped.load();
  gate.Release();  // lets a hung shutdown finish, so the test itself ends
  stopper.join();
  caller.join();
  EXPECT_TRUE(stopped_in_time)
      << "Daemon::Shutdown waited for an event only another process completes";
  // The stream gave up its wait, and the call in flight says why.
  EXPECT_THAT(synchronized,
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, HasSubstr("shutting down")));
}

}  // namespace
}  // namespace gpumux::testing
