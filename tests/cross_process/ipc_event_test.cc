// Interprocess events between real processes and a real gpumuxd: a child
// waits on an event the daemon records, the daemon's session uses an event a
// child recorded itself, and a Free waits for a child's event before the
// memory is reused. The children map events as clients do: memory files
// from the memory socket.

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/escaping.h"
#include "gpumux/common/host_ipc_event.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/rpc/ipc_gate.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

using std::chrono::milliseconds;

// True when `pid` exited within `within` (reaped), false if still running.
bool ExitsWithin(Child& child, milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(child.pid(), &status, WNOHANG) == child.pid()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return false;
}

class IpcEventTest : public ::testing::Test {
 protected:
  IpcEventTest()
      : daemon_({"--host-devices=2", "--host-device-memory=256MiB"}),
        session_(daemon_.channel(), "ipc-events"),
        streams_(v1::Stream::NewStub(daemon_.channel())),
        events_(v1::Event::NewStub(daemon_.channel())) {}

  uint64_t OpenEvent(const std::string& handle) {
    v1::OpenIpcHandleRequest request;
    request.set_handle(handle);
    v1::CreateEventResponse opened;
    grpc::Status status = events_->OpenIpcHandle(session_.Context().get(), request, &opened);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return opened.event();
  }

  bool QueryEvent(uint64_t event) {
    v1::EventRequest request;
    request.set_event(event);
    v1::QueryEventResponse done;
    grpc::Status status = events_->Query(session_.Context().get(), request, &done);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return done.done();
  }

  std::string SnapshotStateAt(uint64_t address) {
    v1::GetSnapshotRequest request;
    v1::MemorySnapshot snapshot;
    EXPECT_TRUE(session_.memory().GetSnapshot(session_.Context().get(), request, &snapshot).ok());
    for (const auto& segment : snapshot.segments()) {
      for (const auto& block : segment.blocks()) {
        if (block.address() == address) return block.state();
      }
    }
    return "";
  }

  DaemonProcess daemon_;
  RawSession session_;
  std::unique_ptr<v1::Stream::Stub> streams_;
  std::unique_ptr<v1::Event::Stub> events_;
};

TEST_F(IpcEventTest, ChildWaitsOnAnEventTheDaemonRecordedThroughItsHandle) {
  // A gate this test records and completes by hand holds the daemon stream back.
  IpcGate gate(session_, daemon_.socket_path());
  v1::WaitEventRequest wait;
  wait.set_event(OpenEvent(gate.handle()));
  v1::WaitEventResponse waited;
  ASSERT_TRUE(streams_->WaitEvent(session_.Context().get(), wait, &waited).ok());

  v1::CreateEventRequest create;
  create.set_interprocess(true);
  v1::CreateEventResponse event;
  ASSERT_TRUE(events_->Create(session_.Context().get(), create, &event).ok());
  v1::RecordEventRequest record;
  record.set_event(event.event());
  v1::RecordEventResponse recorded;
  ASSERT_TRUE(events_->Record(session_.Context().get(), record, &recorded).ok());
  v1::EventRequest handle_request;
  handle_request.set_event(event.event());
  v1::GetIpcHandleResponse handle;
  ASSERT_TRUE(events_->GetIpcHandle(session_.Context().get(), handle_request, &handle).ok());
  ASSERT_EQ(handle.handle().size(), 64u);

  Child waiter({"event-wait", daemon_.address(), absl::BytesToHexString(handle.handle())});
  EXPECT_FALSE(ExitsWithin(waiter, milliseconds(150)))
      << "the child saw the event complete before its work ran";
  EXPECT_FALSE(QueryEvent(event.event()));
  gate.Release();
  EXPECT_EQ(waiter.ReadLine(), "completed");
  EXPECT_TRUE(QueryEvent(event.event()));
}

TEST_F(IpcEventTest, SessionUsesAnEventAChildRecorded) {
  Child maker({"event-make", daemon_.address()});
  std::string handle = absl::HexStringToBytes(maker.ReadLine());
  ASSERT_EQ(handle.size(), 64u);
  uint64_t event = OpenEvent(handle);
  EXPECT_FALSE(QueryEvent(event));

  // The daemon's stream waits for the child's work too.
  v1::WaitEventRequest wait;
  wait.set_event(event);
  v1::WaitEventResponse waited;
  ASSERT_TRUE(streams_->WaitEvent(session_.Context().get(), wait, &waited).ok());
  v1::StreamRequest stream;
  v1::QueryStreamResponse stream_done;
  ASSERT_TRUE(streams_->Query(session_.Context().get(), stream, &stream_done).ok());
  EXPECT_FALSE(stream_done.done());

  maker.WriteLine("complete");
  EXPECT_EQ(maker.ReadLine(), "completed");
  v1::EventRequest sync;
  sync.set_event(event);
  v1::SynchronizeEventResponse synced;
  ASSERT_TRUE(events_->Synchronize(session_.Context().get(), sync, &synced).ok());
  EXPECT_TRUE(QueryEvent(event));
  v1::SynchronizeStreamResponse stream_synced;
  ASSERT_TRUE(streams_->Synchronize(session_.Context().get(), stream, &stream_synced).ok());
  maker.WriteLine("exit");
  EXPECT_EQ(maker.Wait(), 0);
}

TEST_F(IpcEventTest, FreedMemoryIsNotReusedBeforeAnotherProcesssEventCompletes) {
  constexpr uint64_t kSize = 1 << 20;
  v1::Allocation first;
  ASSERT_TRUE(session_.Allocate(0, kSize, &first).ok());
  Child maker({"event-make", daemon_.address()});
  std::string handle = absl::HexStringToBytes(maker.ReadLine());

  v1::FreeRequest free;
  free.add_allocation_ids(first.allocation_id());
  free.add_wait_event_handles(handle);
  v1::FreeResponse freed;
  ASSERT_TRUE(session_.memory().Free(session_.Context().get(), free, &freed).ok());
  EXPECT_EQ(SnapshotStateAt(first.address()), "active_pending_free");

  v1::Allocation second;
  ASSERT_TRUE(session_.Allocate(0, kSize, &second).ok());
  EXPECT_NE(second.address(), first.address())
      << "a block was reused while the child's work was pending";

  maker.WriteLine("complete");
  ASSERT_EQ(maker.ReadLine(), "completed");
  v1::Allocation third;  // processes the completed event first, as PyTorch's malloc does
  ASSERT_TRUE(session_.Allocate(0, kSize, &third).ok());
  EXPECT_EQ(third.address(), first.address());
  maker.WriteLine("exit");
  EXPECT_EQ(maker.Wait(), 0);
}

TEST_F(IpcEventTest, AKilledProcesssEventHoldsNeitherMemoryNorStreams) {
  constexpr uint64_t kSize = 1 << 20;
  v1::Allocation first;
  ASSERT_TRUE(session_.Allocate(0, kSize, &first).ok());
  Child maker({"event-make", daemon_.address()});
  std::string handle = absl::HexStringToBytes(maker.ReadLine());
  v1::FreeRequest free;
  free.add_allocation_ids(first.allocation_id());
  free.add_wait_event_handles(handle);
  v1::FreeResponse freed;
  ASSERT_TRUE(session_.memory().Free(session_.Context().get(), free, &freed).ok());
  v1::WaitEventRequest wait;  // the session's default stream waits for the child too
  wait.set_event(OpenEvent(handle));
  v1::WaitEventResponse waited;
  ASSERT_TRUE(streams_->WaitEvent(session_.Context().get(), wait, &waited).ok());

  kill(maker.pid(), SIGKILL);
  EXPECT_EQ(maker.Wait(), 128 + SIGKILL);
  // The record's process is gone, and its work with it: the stream drains
  // and the block is reused.
  auto killed = std::chrono::steady_clock::now();
  v1::StreamRequest stream;
  v1::SynchronizeStreamResponse synced;
  ASSERT_TRUE(streams_->Synchronize(session_.Context().get(), stream, &synced).ok());
  v1::Allocation again;
  ASSERT_TRUE(session_.Allocate(0, kSize, &again).ok());
  EXPECT_EQ(again.address(), first.address());
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(1));
}

TEST_F(IpcEventTest, MalformedWaitHandleFreesNothing) {
  v1::Allocation a;
  ASSERT_TRUE(session_.Allocate(0, 4096, &a).ok());
  v1::FreeRequest free;
  free.add_allocation_ids(a.allocation_id());
  free.add_wait_event_handles(std::string(63, 'x'));
  v1::FreeResponse freed;
  grpc::Status status = session_.memory().Free(session_.Context().get(), free, &freed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(SnapshotStateAt(a.address()), "active_allocated");
}

}  // namespace
}  // namespace gpumux::testing
