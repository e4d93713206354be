// Memory and streams through the client against the real daemon (host
// backend): allocating for a stream, record_stream, and frees that wait for
// interprocess events. Reuse is observed through block addresses: PyTorch's
// allocator hands a freed block of the same size back at once, unless work
// recorded on it is still pending.

#include <string>

#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/memory_snapshot.h"
#include "gtest/gtest.h"
#include "tests/client/client_test_support.h"
#include "tests/client/rpc_recorder.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

constexpr uint64_t kBlock = 4096;

class MemoryStreamsTest : public DaemonClientTest {};

// Pinned to daemon-side allocation: its Free requests on the wire.
class DaemonMemoryStreamsTest : public DaemonClientTest {
 protected:
  DaemonMemoryStreamsTest()
      : DaemonClientTest({.client = {.allocation = AllocationMode::kDaemon}}) {}
};

TEST_F(MemoryStreamsTest, AllocationsComeFromTheirStreamsSegments) {
  absl::StatusOr<Stream> stream = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(stream);
  AllocateOptions on_stream;
  on_stream.stream = *stream;
  absl::StatusOr<DeviceBuffer> mine = memory::Allocate(client(), kBlock, DeviceIndex(1), on_stream);
  absl::StatusOr<DeviceBuffer> default_one = memory::Allocate(client(), kBlock, DeviceIndex(1));
  ASSERT_OK(mine);
  ASSERT_OK(default_one);
  // PyTorch: a segment serves one stream, so the two share none.
  EXPECT_NE(mine->segment_id(), default_one->segment_id());
  absl::StatusOr<std::vector<SegmentInfo>> snapshot =
      memory::MemorySnapshot(client(), DeviceIndex(1));
  ASSERT_OK(snapshot);
  ASSERT_THAT(*snapshot, ::testing::SizeIs(2));
  EXPECT_NE((*snapshot)[0].stream, (*snapshot)[1].stream);
}

TEST_F(MemoryStreamsTest, RecordStreamDelaysReuseUntilTheStreamsWorkCompleted) {
  absl::StatusOr<Stream> side = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(side);
  absl::StatusOr<DeviceBuffer> used = memory::Allocate(client(), kBlock);
  ASSERT_OK(used);
  const uint64_t address = used->address();
  Gate gate(client());
  ASSERT_OK(gate.Hold(*side));  // pending work on the side stream
  ASSERT_OK(memory::RecordStream(client(), *used, *side));
  ASSERT_OK(memory::Free(client(), std::move(*used)));

  absl::StatusOr<DeviceBuffer> meanwhile = memory::Allocate(client(), kBlock);
  ASSERT_OK(meanwhile);
  EXPECT_NE(meanwhile->address(), address);
  gate.Open();
  ASSERT_OK(side->Synchronize());
  absl::StatusOr<DeviceBuffer> after = memory::Allocate(client(), kBlock);
  ASSERT_OK(after);
  EXPECT_EQ(after->address(), address);
}

TEST_F(MemoryStreamsTest, WithoutRecordStreamTheBlockIsReusedAtOnce) {
  // The control for the test above: the same steps without record_stream.
  absl::StatusOr<Stream> side = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(side);
  absl::StatusOr<DeviceBuffer> used = memory::Allocate(client(), kBlock);
  ASSERT_OK(used);
  const uint64_t address = used->address();
  Gate gate(client());
  ASSERT_OK(gate.Hold(*side));
  ASSERT_OK(memory::Free(client(), std::move(*used)));
  absl::StatusOr<DeviceBuffer> again = memory::Allocate(client(), kBlock);
  ASSERT_OK(again);
  EXPECT_EQ(again->address(), address);
}

TEST_F(MemoryStreamsTest, WorkOnAnotherStreamIsRecordedOnTheAllocation) {
  // The Copy contract: freeing right after queuing work on another stream
  // is safe without an explicit record_stream.
  absl::StatusOr<Stream> side = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(side);
  absl::StatusOr<DeviceBuffer> used = memory::Allocate(client(), kBlock);
  ASSERT_OK(used);
  const uint64_t address = used->address();
  Gate gate(client());
  ASSERT_OK(gate.Hold(*side));
  CopyOptions on_side;
  on_side.stream = *side;
  ASSERT_OK(copy::Memset(client(), *used, 0, 0x12, kBlock, on_side).status());
  ASSERT_OK(memory::Free(client(), std::move(*used)));
  absl::StatusOr<DeviceBuffer> meanwhile = memory::Allocate(client(), kBlock);
  ASSERT_OK(meanwhile);
  EXPECT_NE(meanwhile->address(), address);
  gate.Open();
  ASSERT_OK(side->Synchronize());
  absl::StatusOr<DeviceBuffer> after = memory::Allocate(client(), kBlock);
  ASSERT_OK(after);
  EXPECT_EQ(after->address(), address);
}

TEST_F(MemoryStreamsTest, RecordStreamErrors) {
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), kBlock, DeviceIndex(0));
  absl::StatusOr<DeviceBuffer> theirs = memory::Allocate(*other, kBlock, DeviceIndex(0));
  ASSERT_OK(buffer);
  ASSERT_OK(theirs);
  RpcRecorder wire;
  EXPECT_THAT(memory::RecordStream(client(), *buffer, client().DefaultStream(DeviceIndex(1))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device 1")));
  EXPECT_THAT(memory::RecordStream(client(), *buffer, other->DefaultStream(DeviceIndex(0))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another Client")));
  EXPECT_THAT(
      memory::RecordStream(client(), DeviceBuffer(), client().DefaultStream(DeviceIndex(0))),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(wire.Calls(client().session_id(), "Memory/RecordStream"), ::testing::IsEmpty());
  // The daemon's: another session's allocation, a stream it does not know.
  EXPECT_THAT(memory::RecordStream(client(), *theirs, client().DefaultStream(DeviceIndex(0))),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(
      memory::RecordStream(client(), *buffer, Stream(client(), DeviceIndex(0), StreamId(777))),
      StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<Stream> one = client().CreateStream(DeviceIndex(1));
  ASSERT_OK(one);
  // The daemon's own device check, for a created stream named on device 0.
  EXPECT_THAT(memory::RecordStream(client(), *buffer, Stream(client(), DeviceIndex(0), one->id())),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(memory::RecordStream(client(), *buffer, client().DefaultStream(DeviceIndex(0))));
}

TEST_F(MemoryStreamsTest, FreeWaitsForTheEventsItCarries) {
  absl::StatusOr<Stream> side = client().CreateStream(DeviceIndex(0));
  ASSERT_OK(side);
  absl::StatusOr<DeviceBuffer> used = memory::Allocate(client(), kBlock);
  ASSERT_OK(used);
  const uint64_t address = used->address();
  Gate gate(client());
  ASSERT_OK(gate.Hold(*side));
  EventOptions interprocess;
  interprocess.interprocess = true;
  Event last_use(client(), interprocess);
  ASSERT_OK(last_use.Record(*side));
  absl::StatusOr<std::string> handle = last_use.IpcHandle();
  ASSERT_OK(handle);
  ASSERT_OK(memory::Free(client(), std::move(*used), {*handle}));
  EXPECT_FALSE(used->valid());

  absl::StatusOr<DeviceBuffer> meanwhile = memory::Allocate(client(), kBlock);
  ASSERT_OK(meanwhile);
  EXPECT_NE(meanwhile->address(), address);
  gate.Open();
  ASSERT_OK(last_use.Synchronize());
  absl::StatusOr<DeviceBuffer> after = memory::Allocate(client(), kBlock);
  ASSERT_OK(after);
  EXPECT_EQ(after->address(), address);
}

TEST_F(DaemonMemoryStreamsTest, AFreeCarriesItsHandlesToTheDaemon) {
  absl::StatusOr<DeviceBuffer> used = memory::Allocate(client(), kBlock);
  ASSERT_OK(used);
  EventOptions interprocess;
  interprocess.interprocess = true;
  Event last_use(client(), interprocess);
  ASSERT_OK(last_use.Record(client().DefaultStream(DeviceIndex(0))));
  absl::StatusOr<std::string> handle = last_use.IpcHandle();
  ASSERT_OK(handle);
  RpcRecorder wire;
  ASSERT_OK(memory::Free(client(), std::move(*used), {*handle}));
  auto frees = wire.Requests<v1::FreeRequest>(client().session_id(), "Memory/Free");
  ASSERT_THAT(frees, ::testing::SizeIs(1));
  EXPECT_THAT(frees[0].wait_event_handles(), ::testing::ElementsAre(*handle));
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(0u));
}

TEST_F(MemoryStreamsTest, FreeWithBadHandlesLeavesTheBufferAsItWas) {
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), kBlock);
  ASSERT_OK(buffer);
  RpcRecorder wire;
  const std::vector<std::string> short_handle = {std::string(63, 'h')};
  EXPECT_THAT(memory::Free(client(), std::move(*buffer), short_handle),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cudaIpcEventHandle_t expects byte-like object of size 64, but got 63"));
  EXPECT_THAT(wire.Calls(client().session_id(), "Memory/Free"), ::testing::IsEmpty());
  ASSERT_TRUE(buffer->valid());
  // 64 bytes that name no event: the daemon refuses and frees nothing.
  const std::vector<std::string> bogus = {std::string(64, 'h')};
  EXPECT_THAT(memory::Free(client(), std::move(*buffer), bogus),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_TRUE(buffer->valid());
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(1u));
  EXPECT_THAT(memory::Free(client(), DeviceBuffer(), {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(memory::Free(*other, std::move(*buffer), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another Client")));
  ASSERT_TRUE(buffer->valid());
  EXPECT_OK(memory::Free(client(), std::move(*buffer), {}));  // no handles: a plain free
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(0u));
}

}  // namespace
}  // namespace gpumux::testing
