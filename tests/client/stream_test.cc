// Streams through the client against the real daemon (host backend): order
// within a stream, independence and dependencies across streams and devices,
// priorities, and the per-thread current device and stream with their guards.

#include "gpumux/stream.h"

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/guards.h"
#include "gpumux/memory.h"
#include "gpumux/memory_snapshot.h"
#include "gpumux/random.h"
#include "gtest/gtest.h"
#include "tests/client/client_test_support.h"
#include "tests/client/rpc_recorder.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"
#include "tests/support/in_process_daemon.h"

namespace gpumux::testing {
namespace {

using ::testing::SizeIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

InProcessDaemon::Options BigDevices() {
  InProcessDaemon::Options options;
  options.device_memory = 512 * kMiB;
  return options;
}

// The bytes of `buffer` at [offset, offset + size), read through the daemon.
std::string Read(Client& client, const DeviceBuffer& buffer, uint64_t offset, uint64_t size) {
  std::string bytes(size, '\0');
  absl::Status status = copy::DeviceToHost(client, bytes.data(), buffer, offset, size).status();
  EXPECT_OK(status);
  return bytes;
}

class StreamTest : public DaemonClientTest {};

class BigDevicesStreamTest : public DaemonClientTest {
 protected:
  BigDevicesStreamTest() : DaemonClientTest({.daemon = BigDevices()}) {}
};

TEST_F(StreamTest, CreateClampsThePriorityIntoTheDevicesRange) {
  absl::StatusOr<StreamPriorities> range = client().GetStreamPriorityRange(DeviceIndex(0));
  ASSERT_OK(range);
  EXPECT_EQ(range->least, 0);  // the host backend reports Hopper's range
  EXPECT_EQ(range->greatest, -5);

  absl::StatusOr<Stream> high = client().CreateStream(DeviceIndex(0), -100);
  absl::StatusOr<Stream> low = client().CreateStream(DeviceIndex(1), 100);
  absl::StatusOr<Stream> middle = client().CreateStream(DeviceIndex(1), -2);
  absl::StatusOr<Stream> plain = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(high);
  ASSERT_OK(low);
  ASSERT_OK(middle);
  ASSERT_OK(plain);
  EXPECT_EQ(high->priority(), -5);
  EXPECT_EQ(high->device(), DeviceIndex(0));
  EXPECT_EQ(low->priority(), 0);
  EXPECT_EQ(low->device(), DeviceIndex(1));
  EXPECT_EQ(middle->priority(), -2);
  EXPECT_EQ(plain->priority(), 0);
  EXPECT_NE(high->id(), StreamId(0));
  EXPECT_NE(high->id(), plain->id());
  EXPECT_EQ(high->client(), &client());
  EXPECT_THAT(high->Query(), IsOkAndHolds(true));

  EXPECT_THAT(client().GetStreamPriorityRange(DeviceIndex(2)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client().CreateStream(DeviceIndex(7)), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(StreamTest, DefaultStreamsNeedNoRpcAndCannotBeDestroyed) {
  RpcRecorder wire;
  Stream default_one = client().DefaultStream(DeviceIndex(1));
  EXPECT_EQ(default_one.id(), StreamId(0));
  EXPECT_EQ(default_one.device(), DeviceIndex(1));
  EXPECT_TRUE(default_one.is_default());
  EXPECT_THAT(wire.Calls(client().session_id(), "Stream/Create"), ::testing::IsEmpty());
  EXPECT_THAT(default_one.Query(), IsOkAndHolds(true));
  EXPECT_OK(default_one.Synchronize());
  EXPECT_THAT(client().DestroyStream(default_one), StatusIs(absl::StatusCode::kInvalidArgument));

  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  EXPECT_OK(client().DestroyStream(*stream));
  EXPECT_THAT(client().DestroyStream(*stream), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(stream->Query(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(stream->Synchronize(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(StreamTest, HandlesCompareByClientDeviceAndId) {
  Client* a = &client();
  auto b = ConnectAnother();
  ASSERT_NE(b, nullptr);
  absl::StatusOr<Stream> stream = a->CreateStream(DeviceIndex(0), -1);
  ASSERT_OK(stream);
  EXPECT_EQ(*stream, Stream(*a, DeviceIndex(0), stream->id()));  // priority is no part of it
  EXPECT_EQ(a->DefaultStream(DeviceIndex(0)), a->CurrentStream());
  EXPECT_FALSE(a->DefaultStream(DeviceIndex(0)) == a->DefaultStream(DeviceIndex(1)));
  EXPECT_FALSE(a->DefaultStream(DeviceIndex(0)) == b->DefaultStream(DeviceIndex(0)));
  EXPECT_FALSE(*stream == a->DefaultStream(DeviceIndex(0)));
}

TEST_F(StreamTest, StreamsOfOthersOrOfAnotherDeviceAreRefusedByTheDaemon) {
  Client* a = &client();
  auto b = ConnectAnother();
  ASSERT_NE(b, nullptr);
  absl::StatusOr<Stream> theirs = b->CreateStream(DeviceIndex(0));
  ASSERT_OK(theirs);
  // Another session's stream id, wrapped by this client: unknown to its session.
  EXPECT_THAT(Stream(*a, DeviceIndex(0), theirs->id()).Query(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Stream(*a, DeviceIndex(0), StreamId(999)).Synchronize(),
              StatusIs(absl::StatusCode::kNotFound));
  // One's own stream named with the wrong device.
  absl::StatusOr<Stream> mine = a->CreateStream(DeviceIndex(0));
  ASSERT_OK(mine);
  EXPECT_THAT(Stream(*a, DeviceIndex(1), mine->id()).Query(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Stream(*a, DeviceIndex(5), StreamId(0)).Query(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Across Clients the library refuses before asking.
  EXPECT_THAT(mine->WaitStream(*theirs), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->DestroyStream(*theirs), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(BigDevicesStreamTest, WorkOnOneStreamCompletesInOrder) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  constexpr uint64_t kBig = 128 * kMiB;
  absl::StatusOr<DeviceBuffer> source = memory::Allocate(client(), kBig);
  absl::StatusOr<DeviceBuffer> big = memory::Allocate(client(), kBig);
  absl::StatusOr<DeviceBuffer> tail = memory::Allocate(client(), 4096);
  ASSERT_OK(source);
  ASSERT_OK(big);
  ASSERT_OK(tail);
  const std::string pattern = Pattern(kBig, 11);
  CopyOptions staged;
  staged.path = TransferPath::kStaging;
  staged.wait = true;
  ASSERT_OK(copy::HostToDevice(client(), *source, 0, pattern.data(), kBig, staged).status());

  // A large copy, a small copy of its last bytes and a memset that overlaps
  // them, queued back to back: each sees what the one before wrote.
  CopyOptions on_stream;
  on_stream.stream = *stream;
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK(copy::Memset(client(), *big, 0, 0, kBig, on_stream).status());
    ASSERT_OK(copy::DeviceToDevice(client(), *big, 0, *source, 0, kBig, on_stream).status());
    ASSERT_OK(
        copy::DeviceToDevice(client(), *tail, 0, *big, kBig - 4096, 4096, on_stream).status());
    ASSERT_OK(copy::Memset(client(), *tail, 4000, 0x5a, 96, on_stream).status());
    ASSERT_OK(stream->Synchronize());
    EXPECT_THAT(stream->Query(), IsOkAndHolds(true));
    std::string expected = pattern.substr(kBig - 4096);
    expected.replace(4000, 96, std::string(96, '\x5a'));
    ASSERT_EQ(Read(client(), *tail, 0, 4096), expected) << "round " << round;
  }
}

TEST_F(StreamTest, QueryIsFalseWhilePendingAndTrueAfterSynchronize) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4096, DeviceIndex(1));
  ASSERT_OK(buffer);
  Gate gate(client());  // an event of device 0 holds a stream of device 1
  ASSERT_OK(gate.Hold(*stream));
  CopyOptions on_stream;
  on_stream.stream = *stream;
  ASSERT_OK(copy::Memset(client(), *buffer, 0, 0x77, 4096, on_stream).status());
  EXPECT_THAT(stream->Query(), IsOkAndHolds(false));
  EXPECT_EQ(static_cast<unsigned char*>(buffer->data())[0], 0);  // not yet run

  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    EXPECT_OK(stream->Synchronize());
    synchronized = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(synchronized);
  gate.Open();
  waiter.join();
  EXPECT_TRUE(synchronized);
  EXPECT_THAT(stream->Query(), IsOkAndHolds(true));
  EXPECT_EQ(static_cast<unsigned char*>(buffer->data())[4095], 0x77);
}

TEST_F(StreamTest, StreamsRunIndependently) {
  absl::StatusOr<Stream> held = client().CreateStream(DeviceIndex(0));
  absl::StatusOr<Stream> free_running = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(held);
  ASSERT_OK(free_running);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4096);
  ASSERT_OK(buffer);
  Gate gate(client());
  ASSERT_OK(gate.Hold(*held));
  CopyOptions options;
  options.stream = *free_running;
  ASSERT_OK(copy::Memset(client(), *buffer, 0, 0x42, 4096, options).status());
  EXPECT_OK(free_running->Synchronize());
  EXPECT_EQ(static_cast<unsigned char*>(buffer->data())[100], 0x42);
  // The session's default stream is another stream again.
  EXPECT_OK(client().DefaultStream(DeviceIndex(0)).Synchronize());
  EXPECT_THAT(held->Query(), IsOkAndHolds(false));
  gate.Open();
  EXPECT_OK(held->Synchronize());
}

TEST_F(StreamTest, DestroyingAStreamLetsItsQueuedWorkComplete) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4096);
  ASSERT_OK(buffer);
  Gate gate(client());
  ASSERT_OK(gate.Hold(*stream));
  CopyOptions options;
  options.stream = *stream;
  ASSERT_OK(copy::Memset(client(), *buffer, 0, 0x66, 4096, options).status());
  ASSERT_OK(client().DestroyStream(*stream));  // returns at once
  EXPECT_EQ(daemon().Session(client().session_id())->streams(), 0u);
  gate.Open();
  ASSERT_OK(client().Synchronize(DeviceIndex(0)));
  EXPECT_EQ(static_cast<unsigned char*>(buffer->data())[4095], 0x66);
}

TEST_F(StreamTest, DeviceSynchronizeWaitsForEveryStreamOfTheDevice) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  Gate gate(client());
  ASSERT_OK(gate.Hold(*stream));
  EXPECT_OK(client().Synchronize(DeviceIndex(0)));  // another device: nothing to wait for
  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    EXPECT_OK(client().Synchronize(DeviceIndex(1)));
    synchronized = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(synchronized);
  gate.Open();
  waiter.join();
  EXPECT_THAT(stream->Query(), IsOkAndHolds(true));
}

TEST_F(StreamTest, CreatingStreamsStopsAtTheSessionsLimit) {
  absl::Status status;
  std::vector<Stream> streams;
  while (streams.size() < 4096) {
    absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(streams.size() % 2));
    if (!stream.ok()) {
      status = stream.status();
      break;
    }
    streams.push_back(*stream);
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_GT(streams.size(), 0u);
  EXPECT_EQ(daemon().Session(client().session_id())->streams(), streams.size());
  // Destroyed streams make room again.
  ASSERT_OK(client().DestroyStream(streams.back()));
  EXPECT_OK(client().CreateStream(DeviceIndex(0)).status());
}

TEST_F(StreamTest, WaitEventMakesAnotherStreamSeeTheFirstStreamsData) {
  absl::StatusOr<Stream> first = client().CreateStream(DeviceIndex(0));
  absl::StatusOr<Stream> second = client().CreateStream(DeviceIndex(0), -3);
  ASSERT_OK(first);
  ASSERT_OK(second);
  absl::StatusOr<DeviceBuffer> staging = memory::Allocate(client(), 64 * 1024);
  absl::StatusOr<DeviceBuffer> result = memory::Allocate(client(), 64 * 1024);
  ASSERT_OK(staging);
  ASSERT_OK(result);
  const std::string pattern = Pattern(64 * 1024, 21);

  Gate gate(client());
  ASSERT_OK(gate.Hold(*first));
  CopyOptions on_first;
  on_first.stream = *first;
  ASSERT_OK(
      copy::HostToDevice(client(), *staging, 0, pattern.data(), pattern.size(), on_first).status());
  absl::StatusOr<Event> written = first->RecordEvent();
  ASSERT_OK(written);
  ASSERT_OK(second->WaitEvent(*written));
  CopyOptions on_second;
  on_second.stream = *second;
  ASSERT_OK(
      copy::DeviceToDevice(client(), *result, 0, *staging, 0, pattern.size(), on_second).status());
  EXPECT_THAT(second->Query(), IsOkAndHolds(false));
  EXPECT_THAT(written->Query(), IsOkAndHolds(false));

  gate.Open();
  ASSERT_OK(second->Synchronize());
  EXPECT_THAT(written->Query(), IsOkAndHolds(true));
  EXPECT_TRUE(Read(client(), *result, 0, pattern.size()) == pattern);
}

TEST_F(StreamTest, WaitEventWorksAcrossDevices) {
  absl::StatusOr<Stream> on_zero = client().CreateStream(DeviceIndex(0));
  absl::StatusOr<Stream> on_one = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(on_zero);
  ASSERT_OK(on_one);
  Gate gate(client());
  ASSERT_OK(gate.Hold(*on_zero));
  absl::StatusOr<Event> marker = on_zero->RecordEvent();
  ASSERT_OK(marker);
  EXPECT_EQ(marker->device(), DeviceIndex(0));
  ASSERT_OK(on_one->WaitEvent(*marker));
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512, DeviceIndex(1));
  ASSERT_OK(buffer);
  CopyOptions options;
  options.stream = *on_one;
  ASSERT_OK(copy::Memset(client(), *buffer, 0, 0x31, 512, options).status());
  EXPECT_THAT(on_one->Query(), IsOkAndHolds(false));
  gate.Open();
  ASSERT_OK(on_one->Synchronize());
  EXPECT_EQ(static_cast<unsigned char*>(buffer->data())[511], 0x31);
}

TEST_F(StreamTest, WaitStreamWaitsForWorkQueuedSoFar) {
  absl::StatusOr<Stream> producer = client().CreateStream(DeviceIndex(1));
  absl::StatusOr<Stream> consumer = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(producer);
  ASSERT_OK(consumer);
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(client(), 1000, DeviceIndex(1));
  absl::StatusOr<DeviceBuffer> b = memory::Allocate(client(), 1000, DeviceIndex(1));
  ASSERT_OK(a);
  ASSERT_OK(b);
  const std::string pattern = Pattern(1000, 5);
  Gate gate(client());
  ASSERT_OK(gate.Hold(*producer));
  CopyOptions on_producer;
  on_producer.stream = *producer;
  ASSERT_OK(copy::HostToDevice(client(), *a, 0, pattern.data(), 1000, on_producer).status());
  ASSERT_OK(consumer->WaitStream(*producer));
  CopyOptions on_consumer;
  on_consumer.stream = *consumer;
  ASSERT_OK(copy::DeviceToDevice(client(), *b, 0, *a, 0, 1000, on_consumer).status());
  EXPECT_THAT(consumer->Query(), IsOkAndHolds(false));
  gate.Open();
  ASSERT_OK(consumer->Synchronize());
  EXPECT_EQ(Read(client(), *b, 0, 1000), pattern);
}

TEST_F(StreamTest, NeverRecordedEventsAddNoWait) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  RpcRecorder wire;
  Event lazy(client());
  EXPECT_OK(stream->WaitEvent(lazy));  // not even created: no RPC
  EXPECT_THAT(wire.Calls(client().session_id(), "Stream/WaitEvent"), ::testing::IsEmpty());
  absl::StatusOr<Event> created = client().CreateEvent(DeviceIndex(1));
  ASSERT_OK(created);
  EXPECT_OK(stream->WaitEvent(*created));  // created, never recorded: the daemon adds no wait
  EXPECT_THAT(wire.Calls(client().session_id(), "Stream/WaitEvent"), SizeIs(1));
  EXPECT_THAT(stream->Query(), IsOkAndHolds(true));
  EXPECT_OK(stream->Synchronize());
}

TEST_F(StreamTest, RecordEventIntoAGivenEvent) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  Event event(client());
  EXPECT_FALSE(event.created());
  ASSERT_OK(stream->RecordEvent(event));
  EXPECT_TRUE(event.created());
  EXPECT_EQ(event.device(), DeviceIndex(1));
  EXPECT_OK(event.Synchronize());
  EXPECT_THAT(event.Query(), IsOkAndHolds(true));
}

// --- Current device and stream -------------------------------------------------

TEST_F(StreamTest, ThreadsStartOnDeviceZeroWithDefaultStreams) {
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
  EXPECT_EQ(client().CurrentStream(), client().DefaultStream(DeviceIndex(0)));
  EXPECT_EQ(client().CurrentStream(DeviceIndex(1)), client().DefaultStream(DeviceIndex(1)));
}

TEST_F(StreamTest, SetDeviceChecksTheRangeAndSetStreamTheOwner) {
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  EXPECT_THAT(client().SetDevice(DeviceIndex(2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "device 2 is out of range: this daemon has 2 devices (0..1)"));
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
  ASSERT_OK(client().SetDevice(DeviceIndex(1)));
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
  EXPECT_EQ(client().CurrentStream(), client().DefaultStream(DeviceIndex(1)));
  EXPECT_EQ(other->CurrentDevice(), DeviceIndex(0));  // each Client its own

  absl::StatusOr<Stream> theirs = other->CreateStream(DeviceIndex(0));
  ASSERT_OK(theirs);
  EXPECT_THAT(client().SetStream(*theirs),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("another Client")));
  absl::StatusOr<Stream> mine = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(mine);
  ASSERT_OK(client().SetStream(*mine));  // also makes its device current, as PyTorch does
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
  EXPECT_EQ(client().CurrentStream(), *mine);
  EXPECT_EQ(client().CurrentStream(DeviceIndex(1)), client().DefaultStream(DeviceIndex(1)));
}

// PyTorch's rule: torch.cuda.set_device(-1) and torch.cuda.device(-1) change
// nothing, and torch.cuda.Stream(-1) is a stream of the current device.
TEST_F(StreamTest, ANegativeDeviceIsTheCurrentOneOrChangesNothing) {
  ASSERT_OK(client().SetDevice(DeviceIndex(1)));
  EXPECT_OK(client().SetDevice(DeviceIndex(-1)));
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
  {
    DeviceGuard none(client(), DeviceIndex(-1));
    EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
    DeviceGuard zero(client(), DeviceIndex(0));
    EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
  }
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
  absl::StatusOr<Stream> current = client().CreateStream(DeviceIndex(-1));
  ASSERT_OK(current);
  EXPECT_EQ(current->device(), DeviceIndex(1));
  ASSERT_OK(client().SetStream(*current));
  EXPECT_EQ(client().CurrentStream(), *current);
}

TEST_F(StreamTest, StreamGuardSetsAndRestoresStreamsAndDevice) {
  absl::StatusOr<Stream> zero = client().CreateStream(DeviceIndex(0), -1);
  absl::StatusOr<Stream> one = client().CreateStream(DeviceIndex(1));
  absl::StatusOr<Stream> one_more = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(zero);
  ASSERT_OK(one);
  ASSERT_OK(one_more);
  ASSERT_OK(client().SetStream(*zero));
  {
    StreamGuard outer(*one);
    EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
    EXPECT_EQ(client().CurrentStream(), *one);
    EXPECT_EQ(client().CurrentStream(DeviceIndex(0)), *zero);
    {
      StreamGuard inner(*one_more);
      EXPECT_EQ(client().CurrentStream(), *one_more);
      DeviceGuard device(client(), DeviceIndex(0));
      EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
      EXPECT_EQ(client().CurrentStream(), *zero);
      EXPECT_EQ(client().CurrentStream().priority(), -1);
    }
    EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
    EXPECT_EQ(client().CurrentStream(), *one);
  }
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
  EXPECT_EQ(client().CurrentStream(), *zero);
  EXPECT_EQ(client().CurrentStream(DeviceIndex(1)), client().DefaultStream(DeviceIndex(1)));
}

TEST_F(StreamTest, CurrentDeviceAndStreamArePerThread) {
  absl::StatusOr<Stream> one = client().CreateStream(DeviceIndex(1));
  absl::StatusOr<Stream> zero = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(one);
  ASSERT_OK(zero);
  StreamGuard guard(*one);
  std::thread other([&] {
    EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
    EXPECT_EQ(client().CurrentStream(DeviceIndex(1)), client().DefaultStream(DeviceIndex(1)));
    StreamGuard own(*zero);
    EXPECT_EQ(client().CurrentStream(), *zero);
  });
  other.join();
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
  EXPECT_EQ(client().CurrentStream(), *one);
  EXPECT_EQ(client().CurrentStream(DeviceIndex(0)), client().DefaultStream(DeviceIndex(0)));
}

TEST_F(StreamTest, WorkAndAllocationsDefaultToTheCurrentStream) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  RpcRecorder wire;
  absl::StatusOr<DeviceBuffer> inside;
  {
    StreamGuard guard(*stream);
    inside = memory::Allocate(client(), 512, client().CurrentDevice());
    ASSERT_OK(inside);
    ASSERT_OK(copy::Memset(client(), *inside, 0, 1, 512).status());
    ASSERT_OK(random::ManualSeed(client(), 3));  // the current device's generator
  }
  absl::StatusOr<DeviceBuffer> outside = memory::Allocate(client(), 512, DeviceIndex(1));
  ASSERT_OK(outside);
  EXPECT_EQ(inside->device(), DeviceIndex(1));
  // Each came from a segment of the stream it was allocated for.
  absl::StatusOr<std::vector<SegmentInfo>> snapshot =
      memory::MemorySnapshot(client(), DeviceIndex(1));
  ASSERT_OK(snapshot);
  auto stream_of = [&](const DeviceBuffer& buffer) -> std::optional<uint64_t> {
    for (const SegmentInfo& segment : *snapshot) {
      if (segment.segment_id == buffer.segment_id()) return segment.stream;
    }
    return std::nullopt;
  };
  EXPECT_THAT(stream_of(*inside), ::testing::Optional(stream->id().value()));
  EXPECT_THAT(stream_of(*outside), ::testing::Optional(0u));
  const SessionId session = client().session_id();
  auto memsets = wire.Requests<v1::MemsetRequest>(session, "Copy/Memset");
  ASSERT_THAT(memsets, SizeIs(1));
  EXPECT_EQ(memsets[0].options().stream(), stream->id().value());
  auto seeds = wire.Requests<v1::ManualSeedRequest>(session, "Random/ManualSeed");
  ASSERT_THAT(seeds, SizeIs(1));
  EXPECT_EQ(seeds[0].device(), 1);
  EXPECT_THAT(random::InitialSeed(client(), DeviceIndex(1)), IsOkAndHolds(3u));
}

TEST_F(StreamTest, AStreamOfAnotherDeviceOrClientIsRefusedForWork) {
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512, DeviceIndex(0));
  ASSERT_OK(buffer);
  CopyOptions wrong_device;
  wrong_device.stream = client().DefaultStream(DeviceIndex(1));
  EXPECT_THAT(copy::Memset(client(), *buffer, 0, 1, 512, wrong_device),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "stream 0 is on device 1, but the memset is on device 0; use a stream of "
                       "device 0"));
  AllocateOptions allocate_wrong;
  allocate_wrong.stream = client().DefaultStream(DeviceIndex(1));
  EXPECT_THAT(memory::Allocate(client(), 512, DeviceIndex(0), allocate_wrong),
              StatusIs(absl::StatusCode::kInvalidArgument));
  CopyOptions foreign;
  foreign.stream = other->DefaultStream(DeviceIndex(0));
  EXPECT_THAT(copy::Memset(client(), *buffer, 0, 1, 512, foreign),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("another Client")));
  // A stream of device 1 named as one of device 0: the daemon's check.
  absl::StatusOr<Stream> one = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(one);
  CopyOptions misnamed;
  misnamed.stream = Stream(client(), DeviceIndex(0), one->id());
  EXPECT_THAT(copy::Memset(client(), *buffer, 0, 1, 512, misnamed),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A stream the daemon does not know for this session.
  CopyOptions unknown;
  unknown.stream = Stream(client(), DeviceIndex(0), StreamId(4242));
  EXPECT_THAT(copy::Memset(client(), *buffer, 0, 1, 512, unknown),
              StatusIs(absl::StatusCode::kNotFound));
  AllocateOptions allocate_unknown;
  allocate_unknown.stream = Stream(client(), DeviceIndex(0), StreamId(4242));
  EXPECT_THAT(memory::Allocate(client(), 512, DeviceIndex(0), allocate_unknown),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace gpumux::testing
