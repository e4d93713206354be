// Copies and memset through the client against the real daemon (host
// backend): seeded random bytes both ways over the inline and staging paths,
// unaligned sizes and offsets, both devices, chunking, completion events, how
// staged copies share the staging buffer, and the exact error codes.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client_testing.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gtest/gtest.h"
#include "tests/client/client_test_support.h"
#include "tests/client/rpc_recorder.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The smallest staging buffer (2 MiB: halves of 1 MiB), so that a few MiB
// take several chunks.
ClientOptions SmallStaging() {
  ClientOptions options;
  options.staging_buffer_size = 2 * kMiB;
  return options;
}

class CopyTest : public DaemonClientTest {};

class SmallStagingCopyTest : public DaemonClientTest {
 protected:
  SmallStagingCopyTest() : DaemonClientTest({.client = SmallStaging()}) {}
};

// Pinned to daemon-side allocation: which ranges the daemon checks, which
// the client (the wire); a local block's are all checked in the client
// (local_allocation_test).
class DaemonSmallStagingCopyTest : public DaemonClientTest {
 protected:
  static ClientOptions Options() {
    ClientOptions options = SmallStaging();
    options.allocation = AllocationMode::kDaemon;
    return options;
  }
  DaemonSmallStagingCopyTest() : DaemonClientTest({.client = Options()}) {}
};

// Devices of 256 MiB, for copies larger than one 64 MiB message.
class BigDevicesCopyTest : public DaemonClientTest {
 protected:
  BigDevicesCopyTest() : DaemonClientTest({.daemon = {.device_memory = 256 * kMiB}}) {}
};

CopyOptions Via(TransferPath path) {
  CopyOptions options;
  options.path = path;
  return options;
}

std::string PathName(TransferPath path) {
  switch (path) {
    case TransferPath::kAuto:
      return "Auto";
    case TransferPath::kInline:
      return "Inline";
    case TransferPath::kStaging:
      return "Staging";
  }
  return "?";
}

// (device, path up, path down): every pairing, so that each direction of
// each path is checked against the other.
class CopyRoundTripTest
    : public DaemonClientTest,
      public ::testing::WithParamInterface<std::tuple<int, TransferPath, TransferPath>> {
 protected:
  CopyRoundTripTest() : DaemonClientTest({.client = SmallStaging()}) {}
};

TEST_P(CopyRoundTripTest, RandomBytesSurviveAtUnalignedSizesAndOffsets) {
  const auto [device_index, up, down] = GetParam();
  const DeviceIndex device(device_index);
  uint64_t seed = 1000 * device_index + 10 * static_cast<int>(up) + static_cast<int>(down);
  for (uint64_t size : {uint64_t{1}, uint64_t{7}, uint64_t{4095}, kMiB + 3, 3 * kMiB + 513}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{513}}) {
      SCOPED_TRACE(absl::StrCat("size ", size, " offset ", offset));
      absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), offset + size + 11, device);
      ASSERT_OK(buffer);
      CopyOptions wait;
      wait.wait = true;
      ASSERT_OK(copy::Memset(client(), *buffer, 0, 0xa5, buffer->size(), wait).status());
      const std::string sent = Pattern(size, ++seed);
      ASSERT_OK(copy::HostToDevice(client(), *buffer, offset, sent.data(), size, Via(up)).status());
      ASSERT_OK(client().CurrentStream(device).Synchronize());
      // The bytes are in the daemon's memory (seen through this process's
      // mapping of the segment), and nothing around them was touched.
      const char* mapped = static_cast<const char*>(buffer->data());
      ASSERT_TRUE(std::string(mapped + offset, size) == sent);
      EXPECT_EQ(std::string(mapped, offset), std::string(offset, '\xa5'));
      EXPECT_EQ(std::string(mapped + offset + size, 11), std::string(11, '\xa5'));

      std::string received(size + 2, '\x01');
      ASSERT_OK(copy::DeviceToHost(client(), received.data() + 1, *buffer, offset, size, Via(down))
                    .status());
      EXPECT_TRUE(received.substr(1, size) == sent);
      EXPECT_EQ(received.front(), '\x01');
      EXPECT_EQ(received.back(), '\x01');
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    DevicesAndPaths, CopyRoundTripTest,
    ::testing::Combine(::testing::Values(0, 1),
                       ::testing::Values(TransferPath::kAuto, TransferPath::kInline,
                                         TransferPath::kStaging),
                       ::testing::Values(TransferPath::kInline, TransferPath::kStaging)),
    [](const auto& param_info) {
      return absl::StrCat("Device", std::get<0>(param_info.param), "Up",
                          PathName(std::get<1>(param_info.param)), "Down",
                          PathName(std::get<2>(param_info.param)));
    });

TEST_F(CopyTest, AutoGoesInlineUpToTheLimitAndStagesAbove) {
  ClientOptions options = SmallStaging();
  options.max_inline_copy = 4096;
  auto inline_up_to_4k = ConnectAnother(options);
  ASSERT_NE(inline_up_to_4k, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*inline_up_to_4k, 3 * kMiB);
  ASSERT_OK(buffer);
  const std::string bytes = Pattern(3 * kMiB, 3);
  RpcRecorder wire;
  const SessionId session = inline_up_to_4k->session_id();
  ASSERT_OK(copy::HostToDevice(*inline_up_to_4k, *buffer, 0, bytes.data(), 4096).status());
  auto calls = wire.Requests<v1::HostToDeviceRequest>(session, "Copy/HostToDevice");
  ASSERT_THAT(calls, SizeIs(1));
  EXPECT_TRUE(calls[0].has_data());
  EXPECT_THAT(wire.Calls(session, "Copy/GetStagingBuffer"), IsEmpty());  // not needed yet

  // 3 MiB through 1 MiB halves: three calls, alternating halves.
  ASSERT_OK(copy::HostToDevice(*inline_up_to_4k, *buffer, 0, bytes.data(), 3 * kMiB).status());
  calls = wire.Requests<v1::HostToDeviceRequest>(session, "Copy/HostToDevice");
  ASSERT_THAT(calls, SizeIs(4));
  for (int i = 1; i < 4; ++i) {
    ASSERT_TRUE(calls[i].has_staging());
    EXPECT_EQ(calls[i].staging().offset(), (i - 1) % 2 * kMiB);
    EXPECT_EQ(calls[i].staging().size(), kMiB);
    EXPECT_EQ(calls[i].dst().offset(), (i - 1) * kMiB);
  }
  EXPECT_THAT(wire.Calls(session, "Copy/GetStagingBuffer"), SizeIs(1));
  std::string back(3 * kMiB, '\0');
  ASSERT_OK(copy::DeviceToHost(*inline_up_to_4k, back.data(), *buffer, 0, 3 * kMiB).status());
  EXPECT_TRUE(back == bytes);
  EXPECT_THAT(wire.Calls(session, "Copy/GetStagingBuffer"), SizeIs(1));  // mapped once
}

TEST_F(CopyTest, TheStagingBufferIsRoundedTo2MiBAndAtMost4GiB) {
  ClientOptions options;
  options.staging_buffer_size = 3 * kMiB;
  auto rounded = ConnectAnother(options);
  options.staging_buffer_size = (uint64_t{4} << 30) + 1;
  auto greedy = ConnectAnother(options);
  ASSERT_NE(rounded, nullptr);
  ASSERT_NE(greedy, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*rounded, 4096);
  absl::StatusOr<DeviceBuffer> other = memory::Allocate(*greedy, 4096);
  ASSERT_OK(buffer);
  ASSERT_OK(other);
  const std::string bytes = Pattern(4096, 31);
  EXPECT_EQ(gpumux::StagingBufferSizeForTest(*rounded), 0u);
  ASSERT_OK(
      copy::HostToDevice(*rounded, *buffer, 0, bytes.data(), 4096, Via(TransferPath::kStaging))
          .status());
  EXPECT_EQ(gpumux::StagingBufferSizeForTest(*rounded), 4 * kMiB);
  EXPECT_THAT(
      copy::HostToDevice(*greedy, *other, 0, bytes.data(), 4096, Via(TransferPath::kStaging)),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(gpumux::StagingBufferSizeForTest(*greedy), 0u);
  // Inline copies need no staging buffer.
  EXPECT_OK(copy::HostToDevice(*greedy, *other, 0, bytes.data(), 4096, Via(TransferPath::kInline))
                .status());
}

TEST_F(BigDevicesCopyTest, InlineCopiesAbove64MiBAreSplit) {
  constexpr uint64_t kSize = 64 * kMiB + 4097;
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), kSize, DeviceIndex(1));
  ASSERT_OK(buffer);
  const std::string bytes = Pattern(kSize, 64);
  RpcRecorder wire;
  CopyOptions inline_wait = Via(TransferPath::kInline);
  inline_wait.wait = true;
  ASSERT_OK(copy::HostToDevice(client(), *buffer, 0, bytes.data(), kSize, inline_wait).status());
  auto ups = wire.Requests<v1::HostToDeviceRequest>(client().session_id(), "Copy/HostToDevice");
  ASSERT_THAT(ups, SizeIs(2));
  EXPECT_EQ(ups[0].data().size(), 64 * kMiB);  // a full 64 MiB message each way
  EXPECT_FALSE(ups[0].options().wait());
  EXPECT_TRUE(ups[1].options().wait());
  std::string back(kSize, '\0');
  ASSERT_OK(copy::DeviceToHost(client(), back.data(), *buffer, 0, kSize, Via(TransferPath::kInline))
                .status());
  EXPECT_TRUE(back == bytes);
  EXPECT_THAT(wire.Calls(client().session_id(), "Copy/DeviceToHost"), SizeIs(2));
}

TEST_F(CopyTest, DeviceToDeviceWithinAndAcrossDevices) {
  constexpr uint64_t kSize = 100 * 1024 + 3;
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(client(), kSize, DeviceIndex(0));
  absl::StatusOr<DeviceBuffer> b = memory::Allocate(client(), kSize + 100, DeviceIndex(1));
  absl::StatusOr<DeviceBuffer> c = memory::Allocate(client(), kSize, DeviceIndex(1));
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  const std::string bytes = Pattern(kSize, 8);
  // Held back on device 0's current stream: the copy to device 1 waits for
  // it, as PyTorch's copy_ across devices does.
  Gate gate(client());
  ASSERT_OK(gate.Hold(client().CurrentStream(DeviceIndex(0))));
  ASSERT_OK(copy::HostToDevice(client(), *a, 0, bytes.data(), kSize).status());
  RpcRecorder wire;
  std::thread opener([&] {
    absl::SleepFor(absl::Milliseconds(50));
    gate.Open();
  });
  ASSERT_OK(copy::DeviceToDevice(client(), *b, 37, *a, 0, kSize).status());  // 0 -> 1
  opener.join();
  auto waits = wire.Requests<v1::WaitStreamRequest>(client().session_id(), "Stream/WaitStream");
  ASSERT_THAT(waits, SizeIs(1));
  EXPECT_EQ(waits[0].stream().device(), 1);
  EXPECT_EQ(waits[0].other().device(), 0);
  ASSERT_OK(copy::DeviceToDevice(client(), *c, 1, *b, 38, kSize - 1).status());  // within 1
  ASSERT_OK(client().Synchronize(DeviceIndex(1)));
  EXPECT_TRUE(std::string(static_cast<char*>(b->data()) + 37, kSize) == bytes);
  EXPECT_TRUE(std::string(static_cast<char*>(c->data()) + 1, kSize - 2) ==
              bytes.substr(1, kSize - 2));
  // Overlapping ranges of one buffer move like memmove.
  std::string expected(static_cast<char*>(b->data()), kSize + 100);
  std::memmove(expected.data() + 10, expected.data(), 5000);
  ASSERT_OK(copy::DeviceToDevice(client(), *b, 10, *b, 0, 5000).status());
  ASSERT_OK(client().Synchronize(DeviceIndex(1)));
  EXPECT_TRUE(std::string(static_cast<char*>(b->data()), kSize + 100) == expected);
}

TEST_F(CopyTest, MemsetSetsExactlyTheRange) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 10000, DeviceIndex(1));
  ASSERT_OK(buffer);
  const std::string bytes = Pattern(10000, 4);
  ASSERT_OK(copy::HostToDevice(client(), *buffer, 0, bytes.data(), 10000).status());
  CopyOptions wait;
  wait.wait = true;
  ASSERT_OK(copy::Memset(client(), *buffer, 333, 0xee, 4097, wait).status());
  std::string expected = bytes;
  expected.replace(333, 4097, std::string(4097, '\xee'));
  EXPECT_TRUE(std::string(static_cast<char*>(buffer->data()), 10000) == expected);
  ASSERT_OK(copy::Memset(client(), *buffer, 0, 0, 0, wait).status());  // zero bytes: nothing
  EXPECT_TRUE(std::string(static_cast<char*>(buffer->data()), 10000) == expected);
}

TEST_F(CopyTest, ZeroByteCopiesSucceedAndCopyNothing) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 16);
  ASSERT_OK(buffer);
  for (TransferPath path : {TransferPath::kInline, TransferPath::kStaging}) {
    EXPECT_OK(copy::HostToDevice(client(), *buffer, 16, nullptr, 0, Via(path)).status());
    EXPECT_OK(copy::DeviceToHost(client(), nullptr, *buffer, 16, 0, Via(path)).status());
  }
  EXPECT_OK(copy::DeviceToDevice(client(), *buffer, 0, *buffer, 16, 0).status());
}

TEST_F(SmallStagingCopyTest, WaitReturnsAfterTheCopyCompleted) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 3 * kMiB);
  ASSERT_OK(buffer);
  const std::string bytes = Pattern(3 * kMiB, 12);
  for (TransferPath path : {TransferPath::kInline, TransferPath::kStaging}) {
    CopyOptions options = Via(path);
    options.stream = *stream;
    options.wait = true;
    ASSERT_OK(
        copy::HostToDevice(client(), *buffer, 0, bytes.data(), bytes.size(), options).status());
    EXPECT_THAT(stream->Query(), IsOkAndHolds(true)) << PathName(path);
    EXPECT_TRUE(std::string(static_cast<char*>(buffer->data()), bytes.size()) == bytes);
    ASSERT_OK(copy::Memset(client(), *buffer, 0, 0, bytes.size(), options).status());
    EXPECT_THAT(stream->Query(), IsOkAndHolds(true));
    EXPECT_EQ(static_cast<char*>(buffer->data())[bytes.size() - 1], 0);
  }
}

TEST_F(SmallStagingCopyTest, CompletionEventsAreInterprocessEventsOfTheCopysStream) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 3 * kMiB, DeviceIndex(1));
  absl::StatusOr<DeviceBuffer> other = memory::Allocate(client(), 3 * kMiB, DeviceIndex(1));
  ASSERT_OK(buffer);
  ASSERT_OK(other);
  const std::string bytes = Pattern(3 * kMiB, 13);
  Gate gate(client());
  ASSERT_OK(gate.Hold(*stream));
  CopyOptions options;
  options.stream = *stream;
  options.completion_event = true;
  RpcRecorder wire;
  absl::StatusOr<Event> inline_done =
      copy::HostToDevice(client(), *buffer, 0, bytes.data(), 4096, options);
  ASSERT_OK(inline_done);
  // Two chunks, one per staging half: a third would wait for the first,
  // which waits for the gate.
  options.path = TransferPath::kStaging;
  absl::StatusOr<Event> staged_done =
      copy::HostToDevice(client(), *buffer, 0, bytes.data(), 2 * kMiB, options);
  ASSERT_OK(staged_done);
  options.path = TransferPath::kAuto;
  absl::StatusOr<Event> copy_done =
      copy::DeviceToDevice(client(), *other, 0, *buffer, 0, 2 * kMiB, options);
  absl::StatusOr<Event> memset_done = copy::Memset(client(), *buffer, 0, 9, 10, options);
  ASSERT_OK(copy_done);
  ASSERT_OK(memset_done);
  for (const Event* event : {&*inline_done, &*staged_done, &*copy_done, &*memset_done}) {
    EXPECT_TRUE(event->created());
    EXPECT_TRUE(event->options().interprocess);
    EXPECT_EQ(event->device(), DeviceIndex(1));
    EXPECT_THAT(event->Query(), IsOkAndHolds(false));
  }
  absl::StatusOr<std::string> handle = staged_done->IpcHandle();  // came with the reply
  ASSERT_OK(handle);
  EXPECT_EQ(handle->size(), 64u);
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/GetIpcHandle"), IsEmpty());

  gate.Open();
  ASSERT_OK(memset_done->Synchronize());
  for (const Event* event : {&*inline_done, &*staged_done, &*copy_done}) {
    EXPECT_THAT(event->Query(), IsOkAndHolds(true));
  }
  EXPECT_TRUE(std::string(static_cast<char*>(other->data()), 2 * kMiB) ==
              bytes.substr(0, 2 * kMiB));

  // Without asking: an empty Event.
  absl::StatusOr<Event> none = copy::Memset(client(), *buffer, 0, 1, 1);
  ASSERT_OK(none);
  EXPECT_FALSE(none->created());
  EXPECT_EQ(none->client(), nullptr);
}

TEST_F(SmallStagingCopyTest, AStagedCopyWaitsUntilTheQueuedOneHasReadTheBuffer) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(stream);
  absl::StatusOr<DeviceBuffer> first = memory::Allocate(client(), kMiB);
  absl::StatusOr<DeviceBuffer> second = memory::Allocate(client(), kMiB);
  ASSERT_OK(first);
  ASSERT_OK(second);
  Gate gate(client());
  ASSERT_OK(gate.Hold(*stream));
  CopyOptions staged = Via(TransferPath::kStaging);
  staged.stream = *stream;
  // Queued behind the gate, reading staging half 0 once it runs; the source
  // may be overwritten at once.
  std::string source = Pattern(kMiB, 1);
  ASSERT_OK(copy::HostToDevice(client(), *first, 0, source.data(), kMiB, staged).status());
  source = Pattern(kMiB, 2);
  // The next staged copy needs half 0 again: it waits for the first one,
  // through the mapped interprocess event rather than RPCs.
  RpcRecorder wire;
  std::atomic<bool> returned{false};
  std::thread second_copy([&] {
    EXPECT_OK(copy::HostToDevice(client(), *second, 0, source.data(), kMiB, staged).status());
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_FALSE(returned);
  gate.Open();
  second_copy.join();
  EXPECT_THAT(wire.Calls(client().session_id(), "Event/Synchronize"), IsEmpty());
  EXPECT_THAT(wire.Calls(client().session_id(), "Copy/HostToDevice"), SizeIs(1));
  ASSERT_OK(stream->Synchronize());
  EXPECT_TRUE(std::string(static_cast<char*>(first->data()), kMiB) == Pattern(kMiB, 1));
  EXPECT_TRUE(std::string(static_cast<char*>(second->data()), kMiB) == Pattern(kMiB, 2));
}

TEST_F(SmallStagingCopyTest, ManyThreadsCopyThroughOneStagingBuffer) {
  constexpr uint64_t kSize = 2 * kMiB + 77;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), kSize, DeviceIndex(t % 2));
      ASSERT_OK(buffer);
      for (int round = 0; round < 5; ++round) {
        const std::string bytes = Pattern(kSize, 100 * t + round + 1);
        ASSERT_OK(copy::HostToDevice(client(), *buffer, 0, bytes.data(), kSize).status());
        std::string back(kSize, '\0');
        ASSERT_OK(copy::DeviceToHost(client(), back.data(), *buffer, 0, kSize).status());
        ASSERT_TRUE(back == bytes) << "thread " << t << " round " << round;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// --- Errors ----------------------------------------------------------------------

// Copies, memsets and staged copies of `buffer` (1000 bytes) that do not
// fit it, each refused OUT_OF_RANGE, writing nothing.
void ExpectRangesOutsideTheAllocationAreOutOfRange(Client& client) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client, 1000);  // 1024 allocated
  absl::StatusOr<DeviceBuffer> other = memory::Allocate(client, 1000);
  ASSERT_OK(buffer);
  ASSERT_OK(other);
  const std::string bytes = Pattern(3 * kMiB, 5);
  char out[2048];
  constexpr uint64_t kHuge = std::numeric_limits<uint64_t>::max() - 10;
  // Against the requested size (not the rounded one).
  EXPECT_THAT(
      copy::HostToDevice(client, *buffer, 1, bytes.data(), 1000, Via(TransferPath::kInline)),
      StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(
      copy::HostToDevice(client, *buffer, kHuge, bytes.data(), 20, Via(TransferPath::kInline)),
      StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(
      copy::HostToDevice(client, *buffer, 1001, bytes.data(), 0, Via(TransferPath::kInline)),
      StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(copy::DeviceToHost(client, out, *buffer, 999, 2, Via(TransferPath::kInline)),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(copy::DeviceToHost(client, out, *buffer, kHuge, 20, Via(TransferPath::kInline)),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(copy::DeviceToDevice(client, *other, 0, *buffer, 500, 501),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(copy::DeviceToDevice(client, *other, 500, *buffer, 0, 501),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(copy::DeviceToDevice(client, *other, 0, *buffer, kHuge, 20),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(copy::Memset(client, *buffer, 0, 1, 1001), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(copy::Memset(client, *buffer, kHuge, 1, 20), StatusIs(absl::StatusCode::kOutOfRange));
  // A staged copy of several chunks copies nothing when it does not fit.
  EXPECT_THAT(
      copy::HostToDevice(client, *buffer, 0, bytes.data(), 3 * kMiB, Via(TransferPath::kStaging)),
      StatusIs(absl::StatusCode::kOutOfRange, ::testing::HasSubstr("does not fit")));
  EXPECT_THAT(copy::DeviceToHost(client, out, *buffer, 10, 1000, Via(TransferPath::kStaging)),
              StatusIs(absl::StatusCode::kOutOfRange));
  // Nothing was written anywhere.
  EXPECT_EQ(std::string(static_cast<char*>(buffer->data()), 1000), std::string(1000, '\0'));
}

TEST_F(SmallStagingCopyTest, RangesOutsideTheAllocationAreOutOfRange) {
  ExpectRangesOutsideTheAllocationAreOutOfRange(client());
}

TEST_F(DaemonSmallStagingCopyTest, TheDaemonChecksInlineRangesAndTheClientStagedOnes) {
  RpcRecorder wire;
  ExpectRangesOutsideTheAllocationAreOutOfRange(client());
  // The inline copies went to the daemon, which refused them; the staged
  // ones were refused here, before their first chunk.
  EXPECT_THAT(wire.Calls(client().session_id(), "Copy/HostToDevice"), SizeIs(3));
  EXPECT_THAT(wire.Calls(client().session_id(), "Copy/DeviceToHost"), SizeIs(2));
}

TEST_F(CopyTest, AnotherSessionsAllocationsAreNotFound) {
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<DeviceBuffer> mine = memory::Allocate(client(), 4096);
  absl::StatusOr<DeviceBuffer> theirs = memory::Allocate(*other, 4096);
  ASSERT_OK(mine);
  ASSERT_OK(theirs);
  const std::string bytes = Pattern(4096, 6);
  char out[4096];
  for (TransferPath path : {TransferPath::kInline, TransferPath::kStaging}) {
    EXPECT_THAT(copy::HostToDevice(client(), *theirs, 0, bytes.data(), 4096, Via(path)),
                StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(copy::DeviceToHost(client(), out, *theirs, 0, 4096, Via(path)),
                StatusIs(absl::StatusCode::kNotFound));
  }
  EXPECT_THAT(copy::DeviceToDevice(client(), *mine, 0, *theirs, 0, 4096),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(copy::DeviceToDevice(client(), *theirs, 0, *mine, 0, 4096),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(copy::Memset(client(), *theirs, 0, 1, 10), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(std::string(static_cast<char*>(theirs->data()), 4096), std::string(4096, '\0'));
}

TEST_F(CopyTest, EmptyBuffersAndNullPointersAreInvalid) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 64);
  ASSERT_OK(buffer);
  char bytes[64] = {1};
  DeviceBuffer empty;
  EXPECT_THAT(copy::HostToDevice(client(), empty, 0, bytes, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(copy::DeviceToHost(client(), bytes, empty, 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(copy::DeviceToDevice(client(), *buffer, 0, empty, 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(copy::Memset(client(), empty, 0, 0, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(copy::HostToDevice(client(), *buffer, 0, nullptr, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(copy::DeviceToHost(client(), nullptr, *buffer, 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpumux::testing
