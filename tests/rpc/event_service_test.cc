// The Event service end to end over a real Unix socket: flags and devices,
// ids per session, recording, timing, and interprocess handles across
// sessions.

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"
#include "tests/rpc/grpc_status_matchers.h"
#include "tests/rpc/ipc_gate.h"
#include "tests/rpc/stream_calls.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

using EventServiceTest = DaemonTest;

TEST_F(EventServiceTest, EventCreationChecksFlagsAndDevice) {
  RawSession session(channel_, "flags");
  uint64_t timing = 0, blocking = 0, interprocess = 0;
  EXPECT_THAT(CreateEvent(session, 0, {.enable_timing = true}, &timing), GrpcIsOk());
  EXPECT_THAT(CreateEvent(session, 1, {.blocking = true}, &blocking), GrpcIsOk());
  EXPECT_THAT(CreateEvent(session, 1, {.interprocess = true}, &interprocess), GrpcIsOk());
  EXPECT_NE(timing, 0u);
  EXPECT_NE(timing, blocking);
  EXPECT_NE(blocking, interprocess);
  EXPECT_THAT(CreateEvent(session, 0, {.enable_timing = true, .interprocess = true}, nullptr),
              GrpcStatusIs(kInvalid, HasSubstr("enable_timing")));
  EXPECT_THAT(CreateEvent(session, 2, {}, nullptr), GrpcStatusIs(kInvalid));
  EXPECT_THAT(DestroyEvent(session, blocking), GrpcIsOk());
  EXPECT_THAT(DestroyEvent(session, blocking), GrpcStatusIs(kNotFound));
}

TEST_F(EventServiceTest, ForeignAndUnknownEventsAreNotFound) {
  RawSession mine(channel_, "mine");
  RawSession theirs(channel_, "theirs");
  const uint64_t foreign = NewEvent(theirs, 0, {.interprocess = true});
  const uint64_t own_timing = NewEvent(mine, 0, {.enable_timing = true});
  for (uint64_t event : {foreign, uint64_t{987654321}}) {
    EXPECT_THAT(QueryEvent(mine, event, nullptr), GrpcStatusIs(kNotFound)) << event;
    EXPECT_THAT(SynchronizeEvent(mine, event), GrpcStatusIs(kNotFound)) << event;
    EXPECT_THAT(RecordEvent(mine, event, 0, 0), GrpcStatusIs(kNotFound)) << event;
    EXPECT_THAT(WaitEvent(mine, 0, 0, event), GrpcStatusIs(kNotFound)) << event;
    EXPECT_THAT(GetIpcHandle(mine, event, nullptr), GrpcStatusIs(kNotFound)) << event;
    EXPECT_THAT(ElapsedTime(mine, own_timing, event, nullptr), GrpcStatusIs(kNotFound)) << event;
    EXPECT_THAT(DestroyEvent(mine, event), GrpcStatusIs(kNotFound)) << event;
  }
  EXPECT_THAT(GetIpcHandle(theirs, foreign, nullptr), GrpcIsOk());
}

TEST_F(EventServiceTest, RecordOnAStreamOfAnotherDeviceUsesPyTorchsMessage) {
  RawSession session(channel_, "record");
  const uint64_t event = NewEvent(session, 0);
  const uint64_t on_one = NewStream(session, 1);
  for (uint64_t stream : {on_one, uint64_t{0}}) {
    EXPECT_THAT(
        RecordEvent(session, event, 1, stream),
        GrpcStatusIs(kInvalid, "Event device 0 does not match recording stream's device 1."))
        << stream;
  }
  EXPECT_TRUE(EventDone(session, event)) << "a refused record records nothing";
  EXPECT_THAT(RecordEvent(session, event, 0, 0), GrpcIsOk());
}

TEST_F(EventServiceTest, NeverRecordedEventIsDone) {
  RawSession session(channel_, "never");
  const uint64_t event = NewEvent(session, 1, {.blocking = true});
  EXPECT_TRUE(EventDone(session, event));
  EXPECT_THAT(SynchronizeEvent(session, event), GrpcIsOk());
}

TEST_F(EventServiceTest, ElapsedTimeNeedsTimingEventsThatCompleted) {
  RawSession session(channel_, "elapsed");
  const uint64_t plain = NewEvent(session, 0);
  const uint64_t start = NewEvent(session, 0, {.enable_timing = true});
  const uint64_t end = NewEvent(session, 0, {.enable_timing = true});
  ASSERT_THAT(RecordEvent(session, plain, 0, 0), GrpcIsOk());
  EXPECT_THAT(ElapsedTime(session, plain, end, nullptr),
              GrpcStatusIs(kPrecondition,
                           "Both events must be created with argument 'enable_timing=True'."));
  EXPECT_THAT(ElapsedTime(session, start, plain, nullptr),
              GrpcStatusIs(kPrecondition,
                           "Both events must be created with argument 'enable_timing=True'."));
  EXPECT_THAT(ElapsedTime(session, start, end, nullptr),
              GrpcStatusIs(kPrecondition, HasSubstr("recorded")));

  const uint64_t stream = NewStream(session, 0);
  IpcGate gate(session, socket_path());
  ASSERT_THAT(RecordEvent(session, start, 0, stream), GrpcIsOk());
  gate.Block(session, 0, stream);
  ASSERT_THAT(RecordEvent(session, end, 0, stream), GrpcIsOk());
  EXPECT_THAT(ElapsedTime(session, start, end, nullptr),
              GrpcStatusIs(kPrecondition, HasSubstr("completed")));
  ASSERT_THAT(SynchronizeEvent(session, start),
              GrpcIsOk());  // so at least the sleep lies between them
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gate.Release();
  ASSERT_THAT(SynchronizeEvent(session, end), GrpcIsOk());
  float ms = 0;
  ASSERT_THAT(ElapsedTime(session, start, end, &ms), GrpcIsOk());
  EXPECT_GE(ms, 40.0f);
  EXPECT_LE(ms, 1000.0f);

  const uint64_t other_device = NewEvent(session, 1, {.enable_timing = true});
  ASSERT_THAT(RecordEvent(session, other_device, 1, 0), GrpcIsOk());
  ASSERT_THAT(SynchronizeEvent(session, other_device), GrpcIsOk());
  EXPECT_THAT(ElapsedTime(session, start, other_device, nullptr),
              GrpcStatusIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("on one device")));
}

TEST_F(EventServiceTest, IpcHandlesNeedInterprocessEventsAndSixtyFourBytes) {
  RawSession session(channel_, "ipc");
  const uint64_t plain = NewEvent(session, 0);
  EXPECT_THAT(GetIpcHandle(session, plain, nullptr),
              GrpcStatusIs(kPrecondition, HasSubstr("interprocess")));
  EXPECT_THAT(OpenIpcHandle(session, 0, std::string(10, 'x'), nullptr),
              GrpcStatusIs(kInvalid,
                           "cudaIpcEventHandle_t expects byte-like object of size 64, but got 10"));
  EXPECT_THAT(OpenIpcHandle(session, 0, std::string(64, 'x'), nullptr), GrpcStatusIs(kInvalid));

  const uint64_t shared = NewEvent(session, 0, {.interprocess = true});
  std::string handle;
  ASSERT_THAT(GetIpcHandle(session, shared, &handle), GrpcIsOk());
  EXPECT_EQ(handle.size(), 64u);
  EXPECT_THAT(OpenIpcHandle(session, 2, handle, nullptr), GrpcStatusIs(kInvalid));
  ASSERT_THAT(DestroyEvent(session, shared), GrpcIsOk());
  EXPECT_THAT(OpenIpcHandle(session, 0, handle, nullptr), GrpcStatusIs(kNotFound));
}

TEST_F(EventServiceTest, AnotherSessionWaitsOnAnEventThroughItsHandle) {
  RawSession producer(channel_, "producer");
  RawSession consumer(channel_, "consumer");
  const uint64_t stream = NewStream(producer, 1);
  IpcGate gate(producer, socket_path(), /*device=*/1);
  gate.Block(producer, 1, stream);
  const uint64_t event = NewEvent(producer, 1, {.interprocess = true});
  ASSERT_THAT(RecordEvent(producer, event, 1, stream), GrpcIsOk());
  std::string handle;
  ASSERT_THAT(GetIpcHandle(producer, event, &handle), GrpcIsOk());

  uint64_t opened = 0;
  ASSERT_THAT(OpenIpcHandle(consumer, 1, handle, &opened), GrpcIsOk());
  EXPECT_NE(opened, event);
  EXPECT_FALSE(EventDone(consumer, opened));
  ASSERT_THAT(WaitEvent(consumer, 1, 0, opened), GrpcIsOk());
  EXPECT_FALSE(StreamDone(consumer, 1, 0));
  // The opened id is the consumer's own: the producer cannot use it.
  EXPECT_THAT(QueryEvent(producer, opened, nullptr), GrpcStatusIs(kNotFound));

  gate.Release();
  EXPECT_THAT(SynchronizeStream(consumer, 1, 0), GrpcIsOk());
  EXPECT_TRUE(EventDone(consumer, opened));
  EXPECT_TRUE(EventDone(producer, event));
}

// A daemon event's handle names its device: opening it as another device's
// event is refused, as CUDA refuses it.
TEST_F(EventServiceTest, AnInterprocessEventOpensOnlyOnItsOwnDevice) {
  RawSession owner(channel_, "owner");
  RawSession other(channel_, "other");
  uint64_t event = 0;
  ASSERT_THAT(CreateEvent(owner, 0, EventKind{.interprocess = true}, &event), GrpcIsOk());
  std::string handle;
  ASSERT_THAT(GetIpcHandle(owner, event, &handle), GrpcIsOk());
  uint64_t opened = 0;
  EXPECT_THAT(OpenIpcHandle(other, 1, handle, &opened),
              GrpcStatusIs(kInvalid, HasSubstr("names an event of device 0, not device 1")));
  EXPECT_THAT(OpenIpcHandle(other, 0, handle, &opened), GrpcIsOk());
}

}  // namespace
}  // namespace gpumux::testing
