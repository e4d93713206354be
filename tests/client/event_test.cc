// Events through the client against the real daemon (host backend): lazy
// creation, timing, the errors PyTorch raises, destruction, and interprocess
// events opened by a second session and by a second process.

#include "gpumux/event.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/guards.h"
#include "gpumux/memory.h"
#include "gtest/gtest.h"
#include "tests/client/client_child.h"
#include "tests/client/client_test_support.h"
#include "tests/client/rpc_recorder.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"
#include "tests/support/in_process_daemon.h"

namespace gpumux::testing {
namespace {

using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::SizeIs;

EventOptions Timing() {
  EventOptions options;
  options.enable_timing = true;
  return options;
}

EventOptions Interprocess() {
  EventOptions options;
  options.interprocess = true;
  return options;
}

// Events of `session` the daemon holds now.
std::optional<uint32_t> LiveEvents(const InProcessDaemon& daemon, SessionId session) {
  std::optional<v1::SessionInfo> info = daemon.Session(session);
  if (!info.has_value()) return std::nullopt;
  return info->events();
}

class EventTest : public DaemonClientTest {};

TEST_F(EventTest, CreatedOnTheDeviceOfTheFirstStreamItIsRecordedOn) {
  RpcRecorder wire;
  Event event(client(), Timing());
  EXPECT_FALSE(event.created());
  EXPECT_EQ(event.device(), std::nullopt);
  EXPECT_THAT(event.Query(), IsOkAndHolds(true));  // never recorded
  EXPECT_OK(event.Synchronize());
  EXPECT_OK(event.Wait());
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/Create"), IsEmpty());
  EXPECT_THAT(LiveEvents(daemon(), client().session_id()), Optional(0u));

  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  ASSERT_OK(event.Record(*stream));
  EXPECT_TRUE(event.created());
  EXPECT_EQ(event.device(), DeviceIndex(1));
  EXPECT_THAT(LiveEvents(daemon(), client().session_id()), Optional(1u));
  ASSERT_OK(event.Synchronize());
  EXPECT_THAT(event.Query(), IsOkAndHolds(true));
  ASSERT_OK(event.Record(*stream));  // re-recording creates nothing new
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/Create"), SizeIs(1));
  auto created = wire.Requests<v1::CreateEventRequest>(client().session_id(), "Event/Create");
  EXPECT_TRUE(created[0].enable_timing());
  EXPECT_FALSE(created[0].interprocess());
  EXPECT_EQ(created[0].device(), 1);
}

TEST_F(EventTest, ACreatedEventNeverRecordedIsComplete) {
  absl::StatusOr<Event> event = client().CreateEvent(DeviceIndex(1), Timing());
  ASSERT_OK(event);
  EXPECT_TRUE(event->created());
  EXPECT_EQ(event->device(), DeviceIndex(1));
  EXPECT_THAT(event->Query(), IsOkAndHolds(true));
  EXPECT_OK(event->Synchronize());
}

TEST_F(EventTest, RecordWithoutAStreamUsesTheCurrentOne) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  RpcRecorder wire;
  Event event(client());
  {
    StreamGuard guard(*stream);
    ASSERT_OK(event.Record());
  }
  EXPECT_EQ(event.device(), DeviceIndex(1));
  auto records = wire.Requests<v1::RecordEventRequest>(client().session_id(), "Event/Record");
  ASSERT_THAT(records, SizeIs(1));
  EXPECT_EQ(records[0].stream().stream(), stream->id().value());
  EXPECT_EQ(records[0].stream().device(), 1);
}

TEST_F(EventTest, RecordingOnAnotherDevicesStreamIsRefused) {
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<Event> event = client().CreateEvent(DeviceIndex(0));
  ASSERT_OK(event);
  absl::StatusOr<Stream> one = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(one);
  EXPECT_THAT(event->Record(*one), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(event->Record(client().DefaultStream(DeviceIndex(1))),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(event->Record(other->DefaultStream(DeviceIndex(0))),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("another Client")));
  EXPECT_OK(event->Record(client().DefaultStream(DeviceIndex(0))));
  EXPECT_THAT(Event().Record(client().DefaultStream(DeviceIndex(0))),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(EventTest, ElapsedTimeMeasuresHowLongAStreamWasHeld) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  Gate gate(client());
  Event start(client(), Timing());
  Event end(client(), Timing());
  const absl::Time before = absl::Now();
  ASSERT_OK(start.Record(*stream));
  ASSERT_OK(gate.Hold(*stream));
  ASSERT_OK(end.Record(*stream));
  // Not completed yet: CUDA's cudaErrorNotReady.
  EXPECT_THAT(start.ElapsedTime(end), StatusIs(absl::StatusCode::kFailedPrecondition));
  // The stream is held from when `start` completed (on a loaded machine its
  // worker may reach it late).
  ASSERT_OK(start.Synchronize());
  absl::SleepFor(absl::Milliseconds(150));
  gate.Open();
  ASSERT_OK(end.Synchronize());
  const double wall_ms = absl::ToDoubleMilliseconds(absl::Now() - before);
  absl::StatusOr<float> elapsed = start.ElapsedTime(end);
  ASSERT_OK(elapsed);
  EXPECT_GE(*elapsed, 148.0f);
  EXPECT_LE(*elapsed, wall_ms + 1.0);
  absl::StatusOr<float> backwards = end.ElapsedTime(start);
  ASSERT_OK(backwards);
  EXPECT_FLOAT_EQ(*backwards, -*elapsed);
}

TEST_F(EventTest, ElapsedTimeNeedsTimingEventsThatWereRecorded) {
  Stream stream = client().DefaultStream(DeviceIndex(0));
  RpcRecorder wire;
  Event never(client(), Timing());
  Event also_never(client(), Timing());
  // Never created: PyTorch's check, made here.
  EXPECT_THAT(never.ElapsedTime(also_never),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "Both events must be recorded before calculating elapsed time."));
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/ElapsedTime"), IsEmpty());
  EXPECT_THAT(Event().ElapsedTime(never), StatusIs(absl::StatusCode::kFailedPrecondition));

  // Created but never recorded: the daemon's.
  absl::StatusOr<Event> created = client().CreateEvent(DeviceIndex(0), Timing());
  ASSERT_OK(created);
  Event recorded(client(), Timing());
  ASSERT_OK(recorded.Record(stream));
  ASSERT_OK(recorded.Synchronize());
  EXPECT_THAT(created->ElapsedTime(recorded), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(recorded.ElapsedTime(*created), StatusIs(absl::StatusCode::kFailedPrecondition));

  // Without enable_timing, even when recorded and complete.
  Event plain(client());
  ASSERT_OK(plain.Record(stream));
  ASSERT_OK(plain.Synchronize());
  EXPECT_THAT(plain.ElapsedTime(recorded), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                    ::testing::HasSubstr("enable_timing")));
  EXPECT_THAT(recorded.ElapsedTime(plain), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/ElapsedTime"), SizeIs(4));
}

TEST_F(EventTest, InterprocessEventsCannotTime) {
  EventOptions both;
  both.enable_timing = true;
  both.interprocess = true;
  EXPECT_THAT(client().CreateEvent(DeviceIndex(0), both),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Event lazy(client(), both);
  EXPECT_THAT(lazy.Record(client().DefaultStream(DeviceIndex(0))),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(lazy.created());
  EXPECT_THAT(client().CreateEvent(DeviceIndex(3)), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(EventTest, DestroyingAnEventDestroysItOnTheDaemon) {
  const SessionId session = client().session_id();
  {
    absl::StatusOr<Event> first = client().CreateEvent(DeviceIndex(0));
    absl::StatusOr<Event> second = client().CreateEvent(DeviceIndex(1), Interprocess());
    ASSERT_OK(first);
    ASSERT_OK(second);
    EXPECT_THAT(LiveEvents(daemon(), session), Optional(2u));
    Event moved = std::move(*first);
    EXPECT_FALSE(first->created());
    EXPECT_THAT(LiveEvents(daemon(), session), Optional(2u));
    moved = std::move(*second);  // the first is destroyed
    EXPECT_THAT(LiveEvents(daemon(), session), Optional(1u));
  }
  EXPECT_THAT(LiveEvents(daemon(), session), Optional(0u));
}

TEST_F(EventTest, NothingIsSentOnceTheSessionHasEnded) {
  absl::StatusOr<Event> event = client().CreateEvent(DeviceIndex(0));
  ASSERT_OK(event);
  daemon().Shutdown();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!client().session_ended() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(client().session_ended());
  EXPECT_THAT(event->Query(), StatusIs(absl::StatusCode::kUnavailable));
  RpcRecorder wire;
  *event = Event();
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/Destroy"), IsEmpty());
}

TEST_F(EventTest, IpcHandleIsCreatedOnTheCurrentDeviceAndCached) {
  RpcRecorder wire;
  Event event(client(), Interprocess());
  absl::StatusOr<std::string> handle;
  {
    DeviceGuard guard(client(), DeviceIndex(1));
    handle = event.IpcHandle();
  }
  ASSERT_OK(handle);
  EXPECT_EQ(handle->size(), 64u);
  EXPECT_EQ(event.device(), DeviceIndex(1));
  EXPECT_THAT(event.IpcHandle(), IsOkAndHolds(*handle));
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/GetIpcHandle"), SizeIs(1));
  // The session itself may open it too: a second event of the same capture.
  absl::StatusOr<Event> reopened = client().OpenEventIpcHandle(DeviceIndex(1), *handle);
  ASSERT_OK(reopened);
  EXPECT_NE(reopened->id(), event.id());
  EXPECT_THAT(reopened->IpcHandle(), IsOkAndHolds(*handle));
  EXPECT_THAT(reopened->Query(), IsOkAndHolds(true));

  Event plain(client());
  EXPECT_THAT(plain.IpcHandle(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Event().IpcHandle(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(EventTest, OpeningAnIpcHandleChecksItsLengthAsPyTorchDoes) {
  RpcRecorder wire;
  EXPECT_THAT(client().OpenEventIpcHandle(DeviceIndex(0), std::string(63, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cudaIpcEventHandle_t expects byte-like object of size 64, but got 63"));
  EXPECT_THAT(client().OpenEventIpcHandle(DeviceIndex(0), ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cudaIpcEventHandle_t expects byte-like object of size 64, but got 0"));
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/OpenIpcHandle"), IsEmpty());
  // 64 bytes that name no event: the daemon's.
  EXPECT_THAT(client().OpenEventIpcHandle(DeviceIndex(0), std::string(64, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // A handle whose event is gone.
  std::string handle;
  {
    absl::StatusOr<Event> event = client().CreateEvent(DeviceIndex(0), Interprocess());
    ASSERT_OK(event);
    absl::StatusOr<std::string> got = event->IpcHandle();
    ASSERT_OK(got);
    handle = *got;
  }
  EXPECT_THAT(client().OpenEventIpcHandle(DeviceIndex(0), handle),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(EventTest, ASecondSessionOpensTheHandleAndWaitsOnIt) {
  Client* producer = &client();
  auto consumer = ConnectAnother();
  ASSERT_NE(consumer, nullptr);
  absl::StatusOr<Stream> producing = producer->CreateStream(DeviceIndex(0));
  ASSERT_OK(producing);
  AllocateOptions shareable;
  shareable.shareable = true;
  constexpr uint64_t kSize = 300 * 1024 + 7;
  absl::StatusOr<DeviceBuffer> shared =
      memory::Allocate(*producer, kSize, DeviceIndex(0), shareable);
  ASSERT_OK(shared);
  const std::string pattern = Pattern(kSize, 77);

  Gate gate(*producer);
  ASSERT_OK(gate.Hold(*producing));
  CopyOptions on_producing;
  on_producing.stream = *producing;
  ASSERT_OK(
      copy::HostToDevice(*producer, *shared, 0, pattern.data(), kSize, on_producing).status());
  Event written(*producer, Interprocess());
  ASSERT_OK(written.Record(*producing));
  absl::StatusOr<std::string> handle = written.IpcHandle();
  ASSERT_OK(handle);
  absl::StatusOr<std::string> token = memory::Share(*producer, *shared);
  ASSERT_OK(token);

  absl::StatusOr<DeviceBuffer> imported = memory::Import(*consumer, *token);
  ASSERT_OK(imported);
  absl::StatusOr<Event> opened = consumer->OpenEventIpcHandle(DeviceIndex(0), *handle);
  ASSERT_OK(opened);
  EXPECT_EQ(opened->device(), DeviceIndex(0));
  EXPECT_TRUE(opened->options().interprocess);
  EXPECT_THAT(opened->Query(), IsOkAndHolds(false));
  absl::StatusOr<Stream> consuming = consumer->CreateStream(DeviceIndex(0));
  ASSERT_OK(consuming);
  ASSERT_OK(opened->Wait(*consuming));
  absl::StatusOr<DeviceBuffer> copy = memory::Allocate(*consumer, kSize);
  ASSERT_OK(copy);
  CopyOptions on_consuming;
  on_consuming.stream = *consuming;
  ASSERT_OK(copy::DeviceToDevice(*consumer, *copy, 0, *imported, 0, kSize, on_consuming).status());
  EXPECT_THAT(consuming->Query(), IsOkAndHolds(false));

  gate.Open();
  ASSERT_OK(opened->Synchronize());
  ASSERT_OK(consuming->Synchronize());
  std::string bytes(kSize, '\0');
  ASSERT_OK(copy::DeviceToHost(*consumer, bytes.data(), *copy, 0, kSize).status());
  EXPECT_TRUE(bytes == pattern);
  EXPECT_THAT(LiveEvents(daemon(), consumer->session_id()), Optional(1u));
}

TEST_F(EventTest, AChildProcessOpensTheHandleAndWaitsOnIt) {
  Client* producer = &client();
  absl::StatusOr<Stream> producing = producer->CreateStream(DeviceIndex(0));
  ASSERT_OK(producing);
  AllocateOptions shareable;
  shareable.shareable = true;
  constexpr uint64_t kSize = 2 * 1024 * 1024 + 5;
  absl::StatusOr<DeviceBuffer> shared =
      memory::Allocate(*producer, kSize, DeviceIndex(0), shareable);
  ASSERT_OK(shared);
  const std::string pattern = Pattern(kSize, 99);

  Gate gate(*producer);
  ASSERT_OK(gate.Hold(*producing));
  CopyOptions on_producing;
  on_producing.stream = *producing;
  ASSERT_OK(
      copy::HostToDevice(*producer, *shared, 0, pattern.data(), kSize, on_producing).status());
  Event written(*producer, Interprocess());
  ASSERT_OK(written.Record(*producing));
  absl::StatusOr<std::string> handle = written.IpcHandle();
  ASSERT_OK(handle);
  absl::StatusOr<std::string> token = memory::Share(*producer, *shared);
  ASSERT_OK(token);

  ClientChild child({"wait-copy", daemon().address(), absl::BytesToHexString(*handle), *token,
                     std::to_string(kSize), "99"});
  EXPECT_EQ(child.ReadLine(), "pending");
  EXPECT_EQ(child.ReadLine(), "queued");
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_THAT(written.Query(), IsOkAndHolds(false));
  gate.Open();
  EXPECT_EQ(child.ReadLine(), "verified");
  EXPECT_EQ(child.Wait(), 0);
}

}  // namespace
}  // namespace gpumux::testing
