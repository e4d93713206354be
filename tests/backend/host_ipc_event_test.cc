// HostIpcEvent (gpumux/common/host_ipc_event.h) on its own, and the host backend's
// interprocess events used from real child processes (event_peer) that see
// nothing but the event's memory file (inherited, as a client receives it
// from the memory socket), including children killed between recording an
// event and completing it (abandoned records).

#include "gpumux/common/host_ipc_event.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "server/backend/memory_file_table.h"
#include "tests/backend/event_peer.h"
#include "tests/backend/host_backend_test_util.h"
#include "tests/backend/segment_peer.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using Clock = std::chrono::steady_clock;

constexpr DeviceIndex kDev0(0);
constexpr auto kReply = milliseconds(5000);  // generous: the machine may be loaded

// Another mapping of `event`'s memory file, as another process gets it.
std::unique_ptr<HostIpcEvent> OpenCopy(const HostIpcEvent& event) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> copy = AdoptEventCopy(*event.memory());
  EXPECT_OK(copy);
  return copy.ok() ? *std::move(copy) : nullptr;
}

// The memory file of the backend's event `handle`, as the memory socket
// hands it out.
std::shared_ptr<const SealedMemory> EventFile(const HostBackend& backend,
                                              const std::string& handle) {
  absl::StatusOr<std::string> key = HostIpcEventKey(handle);
  EXPECT_OK(key);
  if (!key.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const SealedMemory>> memory =
      backend.memory_files().Find(*key, MemoryFileTable::kAnySession);
  EXPECT_OK(memory);
  return memory.ok() ? *memory : nullptr;
}

// An event_peer that opens `memory` (inherited).
std::unique_ptr<EventPeer> OpeningPeer(const SealedMemory& memory) {
  return std::make_unique<EventPeer>(std::vector<std::string>{"open", absl::StrCat(memory.fd())},
                                     std::vector<int>{memory.fd()});
}

TEST(HostIpcEventTest, HandleIsTagThenZeroPaddedKey) {
  const std::string key(32, 'a');
  const std::string handle = MakeHostIpcEventHandle(key);
  ASSERT_EQ(handle.size(), kHostIpcEventHandleBytes);
  EXPECT_EQ(handle.substr(0, 8), std::string(kHostIpcEventHandleTag));
  EXPECT_EQ(handle.substr(8, 32), key);
  EXPECT_EQ(handle.find_first_not_of('\0', 40), std::string::npos);
  EXPECT_THAT(HostIpcEventKey(handle), IsOkAndHolds(key));
}

TEST(HostIpcEventTest, TheEventIsASealedMemoryFileNothingCanResize) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> event = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(event);
  const int fd = (*event)->memory()->fd();
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 64);
  const int seals = fcntl(fd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_NE(ftruncate(fd, 0), 0) << "the event could be truncated under its mappings";
  EXPECT_EQ(errno, EPERM);
  (*event)->Record();
  EXPECT_EQ((*event)->recorded(), 1u);
}

TEST(HostIpcEventTest, GenerationsQueryAndCompletionOrder) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> created = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(created);
  HostIpcEvent& event = **created;
  std::unique_ptr<HostIpcEvent> opened = OpenCopy(event);
  ASSERT_NE(opened, nullptr);
  EXPECT_TRUE(event.Query()) << "never recorded";
  EXPECT_EQ(event.recorded(), 0u);
  EXPECT_EQ(event.Record(), 1u);
  EXPECT_FALSE(opened->Query());
  EXPECT_EQ(opened->Record(), 2u) << "both sides draw from one sequence";
  event.Complete(1, 111);
  EXPECT_TRUE(event.IsComplete(1));
  EXPECT_FALSE(opened->IsComplete(2));
  EXPECT_FALSE(event.Query());
  opened->Complete(2, 222);
  EXPECT_TRUE(event.Query());
  EXPECT_EQ(event.completed_at_ns(), 222);
  // A later record completing first also completes the earlier one.
  EXPECT_EQ(event.Record(), 3u);
  EXPECT_EQ(event.Record(), 4u);
  event.Complete(4, 444);
  event.Complete(3, 333);  // late: changes nothing
  EXPECT_TRUE(event.IsComplete(3));
  EXPECT_EQ(event.completed_at_ns(), 444);
}

TEST(HostIpcEventTest, WaitForTimesOutThenWakesOnCompletion) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> event = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(event);
  const uint64_t generation = (*event)->Record();
  const auto start = Clock::now();
  EXPECT_FALSE((*event)->WaitFor(generation, milliseconds(30)));
  EXPECT_GE(Clock::now() - start, milliseconds(30));
  std::thread completer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    (*event)->Complete(generation, 1);
  });
  (*event)->Wait(generation);
  EXPECT_TRUE((*event)->Query());
  completer.join();
  EXPECT_TRUE((*event)->WaitFor(generation, milliseconds(0)));
}

TEST(HostIpcEventTest, ARecordStampsItsRecorderWhichStaysPendingWhileAlive) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> created = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(created);
  std::unique_ptr<HostIpcEvent> opened = OpenCopy(**created);
  ASSERT_NE(opened, nullptr);
  EXPECT_EQ((*created)->recorder_pid(), 0) << "never recorded";
  EXPECT_EQ((*created)->Check(0), HostIpcRecordState::kCompleted);
  const uint64_t generation = opened->Record();
  EXPECT_EQ((*created)->recorder_pid(), getpid());
  // The recorder (this process) lives: nothing is judged abandoned.
  EXPECT_EQ((*created)->Check(generation), HostIpcRecordState::kPending);
  EXPECT_EQ((*created)->Await(generation, milliseconds(30)), HostIpcRecordState::kPending);
  EXPECT_FALSE(opened->Query());
  opened->Complete(generation, 7);
  EXPECT_EQ((*created)->Check(generation), HostIpcRecordState::kCompleted);
  EXPECT_EQ((*created)->Wait(generation), HostIpcRecordState::kCompleted);
  EXPECT_EQ((*created)->completed_at_ns(), 7);
}

TEST(HostIpcEventTest, MalformedHandlesAndFilesAreRejected) {
  const auto kInvalid = StatusIs(absl::StatusCode::kInvalidArgument);
  const std::string handle = MakeHostIpcEventHandle(std::string(32, 'b'));
  EXPECT_THAT(HostIpcEventKey(handle.substr(0, 63)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("63 bytes")));
  EXPECT_THAT(HostIpcEventKey(std::string(64, '\0')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tag")));
  std::string dirty_padding = handle;
  dirty_padding.back() = 'x';
  EXPECT_THAT(HostIpcEventKey(dirty_padding), kInvalid);
  std::string upper = handle;
  upper[8] = 'B';
  EXPECT_THAT(HostIpcEventKey(upper), kInvalid);
  std::string short_key = handle;
  short_key[39] = '\0';
  EXPECT_THAT(HostIpcEventKey(short_key), kInvalid);
  // A 64-byte file without the magic is not an event; another size is not either.
  absl::StatusOr<SealedMemory> impostor = SealedMemory::Create("impostor", 64);
  ASSERT_OK(impostor);
  EXPECT_THAT(HostIpcEvent::Adopt(*std::move(impostor), "impostor"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout version")));
  absl::StatusOr<SealedMemory> page = SealedMemory::Create("page", 4096);
  ASSERT_OK(page);
  EXPECT_THAT(HostIpcEvent::Adopt(*std::move(page), "page"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an interprocess event")));
}

TEST(HostIpcEventTest, ACopyOutlivesTheCreator) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> created = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(created);
  std::unique_ptr<HostIpcEvent> survivor = OpenCopy(**created);
  ASSERT_NE(survivor, nullptr);
  created->reset();
  const uint64_t generation = survivor->Record();
  survivor->Complete(generation, 1);
  EXPECT_TRUE(survivor->Query());
}

// ---- Across processes, through the host backend ----

class HostIpcEventProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(HostTestOptions());
    ASSERT_OK(backend);
    backend_ = *std::move(backend);
    absl::StatusOr<BackendStream> stream = backend_->CreateStream(kDev0, 0);
    ASSERT_OK(stream);
    stream_ = *stream;
    absl::StatusOr<std::unique_ptr<Gate>> gate = Gate::Create(*backend_, kDev0);
    ASSERT_OK(gate);
    gate_ = *std::move(gate);
  }

  // An interprocess event of the backend on device 0, its handle, and its
  // memory file as the memory socket hands it out (null, with a test
  // failure, when any of it could not be had).
  struct SharedEvent {
    BackendEvent event;
    std::string handle;
    std::shared_ptr<const SealedMemory> file;
  };
  SharedEvent MakeSharedEvent() {
    EventFlags flags;
    flags.interprocess = true;
    SharedEvent shared;
    absl::StatusOr<BackendEvent> event = backend_->CreateEvent(kDev0, flags);
    EXPECT_OK(event);
    if (!event.ok()) return shared;
    shared.event = *event;
    absl::StatusOr<std::string> handle = backend_->GetIpcEventHandle(*event);
    EXPECT_OK(handle);
    if (!handle.ok()) return shared;
    shared.handle = *handle;
    shared.file = EventFile(*backend_, shared.handle);
    return shared;
  }

  std::unique_ptr<HostBackend> backend_;
  BackendStream stream_;
  std::unique_ptr<Gate> gate_;
};

TEST_F(HostIpcEventProcessTest, ChildWaitsForAnEventTheBackendRecords) {
  const uint64_t size = 64 * 1024;
  const uint32_t seed = 5;
  absl::StatusOr<BackendSegment> segment = backend_->AllocateSegment(kDev0, size);
  ASSERT_OK(segment);
  const SharedEvent shared = MakeSharedEvent();
  ASSERT_NE(shared.file, nullptr);
  std::shared_ptr<const SealedMemory> segment_file = PeerMemoryFile(*backend_, segment->handle);
  ASSERT_NE(segment_file, nullptr);
  EventPeer peer({"open", absl::StrCat(shared.file->fd())},
                 std::vector<int>{shared.file->fd(), segment_file->fd()});
  ASSERT_TRUE(peer.started());
  ASSERT_EQ(peer.ReadLine(kReply), "opened");
  // The daemon side: data for the client, then the event, all held back.
  auto data = std::make_shared<std::vector<uint8_t>>(size);
  for (uint64_t i = 0; i < size; ++i) (*data)[i] = PeerPatternByte(i, seed);
  ASSERT_OK(gate_->HoldBack(stream_));
  ASSERT_OK(backend_->CopyHostToDevice(stream_, segment->address, data->data(), size, data));
  ASSERT_OK(backend_->RecordEvent(shared.event, stream_));
  ASSERT_TRUE(peer.Send("query"));
  EXPECT_EQ(peer.ReadLine(kReply), "query 0");
  ASSERT_TRUE(peer.Send("wait"));
  EXPECT_EQ(peer.ReadLine(milliseconds(150)), std::nullopt) << "the child did not wait";
  gate_->Open();
  EXPECT_EQ(peer.ReadLine(kReply), "waited 1");
  // What the child reads once its wait returned is what the stream wrote.
  ASSERT_TRUE(peer.Send(absl::StrCat("check ", segment_file->fd(), " ", size, " ", seed)));
  EXPECT_EQ(peer.ReadLine(kReply), "check ok");
  EXPECT_EQ(peer.Finish(), 0);
}

TEST_F(HostIpcEventProcessTest, BackendWaitsForAChildsRecord) {
  const SharedEvent shared = MakeSharedEvent();
  ASSERT_NE(shared.file, nullptr);
  const std::string& handle = shared.handle;
  std::unique_ptr<EventPeer> child = OpeningPeer(*shared.file);
  EventPeer& peer = *child;
  ASSERT_TRUE(peer.started());
  ASSERT_EQ(peer.ReadLine(kReply), "opened");
  ASSERT_TRUE(peer.Send("record"));
  ASSERT_EQ(peer.ReadLine(kReply), "recorded 1");

  absl::StatusOr<BackendEvent> opened = backend_->OpenIpcEventHandle(kDev0, handle);
  ASSERT_OK(opened);
  absl::StatusOr<bool> event_done = backend_->QueryEvent(*opened);
  ASSERT_OK(event_done);
  EXPECT_FALSE(*event_done);
  absl::StatusOr<BackendSegment> segment = backend_->AllocateSegment(kDev0, 4096);
  ASSERT_OK(segment);
  ASSERT_OK(backend_->StreamWaitEvent(stream_, *opened));
  ASSERT_OK(backend_->Memset(stream_, segment->address, 0x77, 4096));
  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    EXPECT_OK(backend_->SynchronizeEvent(*opened));
    synchronized = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  absl::StatusOr<bool> stream_idle = backend_->QueryStream(stream_);
  ASSERT_OK(stream_idle);
  EXPECT_FALSE(*stream_idle);
  EXPECT_FALSE(synchronized);
  ASSERT_TRUE(peer.Send("complete 1"));
  ASSERT_EQ(peer.ReadLine(kReply), "completed");
  waiter.join();
  ASSERT_OK(backend_->SynchronizeStream(stream_));
  std::vector<uint8_t> bytes(4096);
  ASSERT_OK(
      backend_->CopyDeviceToHost(stream_, bytes.data(), segment->address, bytes.size(), nullptr));
  ASSERT_OK(backend_->SynchronizeStream(stream_));
  EXPECT_EQ(bytes, std::vector<uint8_t>(4096, 0x77));

  // Now the backend records the child's event, and the child waits for it.
  ASSERT_OK(gate_->HoldBack(stream_));
  ASSERT_OK(backend_->RecordEvent(*opened, stream_));
  ASSERT_TRUE(peer.Send("query"));
  EXPECT_EQ(peer.ReadLine(kReply), "query 0");
  ASSERT_TRUE(peer.Send("wait"));
  EXPECT_EQ(peer.ReadLine(milliseconds(100)), std::nullopt);
  gate_->Open();
  EXPECT_EQ(peer.ReadLine(kReply), "waited 2");

  // The child exits and the creator is destroyed: the handle names nothing
  // any more, the opened copy still works.
  EXPECT_EQ(peer.Finish(), 0);
  ASSERT_OK(backend_->DestroyEvent(shared.event));
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev0, handle), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(backend_->RecordEvent(*opened, stream_));
  EXPECT_OK(backend_->SynchronizeEvent(*opened));
}

// ---- Records abandoned by a killed recorder ----

class AbandonedRecordTest : public HostIpcEventProcessTest {
 protected:
  // A child that opens `memory` and records once, as a client does before
  // queueing the work that would complete the record.
  std::unique_ptr<EventPeer> RecordingPeer(const SealedMemory& memory, uint64_t generation) {
    auto peer = OpeningPeer(memory);
    EXPECT_TRUE(peer->started());
    EXPECT_EQ(peer->ReadLine(kReply), "opened");
    EXPECT_TRUE(peer->Send("record"));
    EXPECT_EQ(peer->ReadLine(kReply), absl::StrCat("recorded ", generation));
    return peer;
  }
};

TEST_F(AbandonedRecordTest, AWaiterReturnsPromptlyOnceTheRecorderIsKilled) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> event = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(event);
  std::unique_ptr<EventPeer> peer = RecordingPeer(*(*event)->memory(), 1);
  ASSERT_FALSE(HasFailure());
  const pid_t recorder = peer->pid();
  EXPECT_EQ((*event)->recorder_pid(), recorder);
  EXPECT_EQ((*event)->Check(1), HostIpcRecordState::kPending);

  std::atomic<bool> returned{false};
  HostIpcRecordState state = HostIpcRecordState::kPending;
  HostIpcAbandonedRecord abandoned;
  Clock::time_point returned_at;
  std::thread waiter([&] {
    // Bounded, so a waiter that never notices fails the test instead of hanging it.
    state = (*event)->Await(1, std::chrono::seconds(10), &abandoned);
    returned_at = Clock::now();
    returned = true;
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(returned) << "the waiter returned while the recorder lived";
  peer->Kill();
  const Clock::time_point killed_at = Clock::now();
  waiter.join();
  EXPECT_EQ(state, HostIpcRecordState::kAbandoned);
  EXPECT_LT(returned_at - killed_at, milliseconds(1000));
  EXPECT_EQ(abandoned.generation, 1u);
  EXPECT_EQ(abandoned.recorder, recorder);
  // Completed for good: reported once, and the same for every other process.
  EXPECT_EQ((*event)->Check(1), HostIpcRecordState::kCompleted);
  EXPECT_TRUE((*event)->Query());
  std::unique_ptr<HostIpcEvent> other = OpenCopy(**event);
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->IsComplete(1));
  EXPECT_GT((*event)->completed_at_ns(), 0);
  // A new record by a live process is pending again.
  const uint64_t next = other->Record();
  EXPECT_FALSE((*event)->Query());
  other->Complete(next, 1);
  EXPECT_TRUE((*event)->Query());
}

TEST_F(AbandonedRecordTest, AQueryAfterTheKillReadsTheRecordComplete) {
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> event = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(event);
  std::unique_ptr<EventPeer> peer = RecordingPeer(*(*event)->memory(), 1);
  ASSERT_FALSE(HasFailure());
  EXPECT_FALSE((*event)->Query());
  peer->Kill();
  HostIpcAbandonedRecord abandoned;
  EXPECT_EQ((*event)->Check(1, &abandoned), HostIpcRecordState::kAbandoned);
  EXPECT_EQ(abandoned.recorder, peer->pid());
  EXPECT_EQ((*event)->Check(1), HostIpcRecordState::kCompleted);
  EXPECT_TRUE((*event)->IsComplete(1));
  EXPECT_TRUE((*event)->WaitFor(1, milliseconds(0)));
}

TEST_F(AbandonedRecordTest, OnlyTheLatestRecordIsJudged) {
  // The child records, then this (live) process records again: the child's
  // death does not complete anything, since the latest record's recorder
  // lives and completing it completes the earlier one too.
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> event = HostIpcEvent::Create("gpumuxtest-event");
  ASSERT_OK(event);
  std::unique_ptr<EventPeer> peer = RecordingPeer(*(*event)->memory(), 1);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ((*event)->Record(), 2u);
  peer->Kill();
  EXPECT_EQ((*event)->Await(1, milliseconds(100)), HostIpcRecordState::kPending);
  EXPECT_EQ((*event)->Check(2), HostIpcRecordState::kPending);
  (*event)->Complete(2, 1);
  EXPECT_EQ((*event)->Check(1), HostIpcRecordState::kCompleted);
}

TEST_F(AbandonedRecordTest, AStreamWaitingOnAKilledRecordersEventDrains) {
  // A client records an interprocess event itself, as for its own kernels;
  // a daemon stream waits for it, with more work and an event (as the
  // allocator records) behind.
  const SharedEvent shared = MakeSharedEvent();
  ASSERT_NE(shared.file, nullptr);
  const std::string& handle = shared.handle;
  std::unique_ptr<EventPeer> child = RecordingPeer(*shared.file, 1);
  ASSERT_FALSE(HasFailure());
  EventPeer& peer = *child;
  // Completes the record should a failing test stay blocked.
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> rescue = AdoptEventCopy(*shared.file);
  ASSERT_OK(rescue);

  absl::StatusOr<BackendEvent> opened = backend_->OpenIpcEventHandle(kDev0, handle);
  ASSERT_OK(opened);
  absl::StatusOr<BackendSegment> segment = backend_->AllocateSegment(kDev0, 4096);
  ASSERT_OK(segment);
  absl::StatusOr<BackendEvent> behind = backend_->CreateEvent(kDev0, EventFlags{});
  ASSERT_OK(behind);
  ASSERT_OK(backend_->StreamWaitEvent(stream_, *opened));
  ASSERT_OK(backend_->Memset(stream_, segment->address, 0x5a, 4096));
  ASSERT_OK(backend_->RecordEvent(*behind, stream_));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_THAT(backend_->QueryStream(stream_), IsOkAndHolds(false));
  EXPECT_THAT(backend_->QueryEvent(*behind), IsOkAndHolds(false));

  peer.Kill();
  const auto unblock = [&] { (*rescue)->Complete(1, 1); };
  const absl::Time killed_at = absl::Now();
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1), [&] { EXPECT_OK(backend_->SynchronizeStream(stream_)); }, unblock))
      << "the stream stayed blocked on a killed recorder's event";
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(1));
  EXPECT_THAT(backend_->QueryEvent(*behind), IsOkAndHolds(true));
  EXPECT_THAT(backend_->QueryEvent(*opened), IsOkAndHolds(true));
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1), [&] { EXPECT_OK(backend_->SynchronizeEvent(*opened)); }, unblock));
  std::vector<uint8_t> bytes(4096);
  ASSERT_OK(
      backend_->CopyDeviceToHost(stream_, bytes.data(), segment->address, bytes.size(), nullptr));
  ASSERT_OK(backend_->SynchronizeStream(stream_));
  EXPECT_EQ(bytes, std::vector<uint8_t>(4096, 0x5a));
}

TEST_F(AbandonedRecordTest, SynchronizeEventOnAKilledRecordersEventReturns) {
  const SharedEvent shared = MakeSharedEvent();
  ASSERT_NE(shared.file, nullptr);
  std::unique_ptr<EventPeer> peer = RecordingPeer(*shared.file, 1);
  ASSERT_FALSE(HasFailure());
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> rescue = AdoptEventCopy(*shared.file);
  ASSERT_OK(rescue);
  EXPECT_THAT(backend_->QueryEvent(shared.event), IsOkAndHolds(false));
  bool synchronized = false;
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1),
      [&] {
        std::thread killer([&] {
          std::this_thread::sleep_for(milliseconds(50));
          peer->Kill();
        });
        EXPECT_OK(backend_->SynchronizeEvent(shared.event));
        synchronized = true;
        killer.join();
      },
      [&] { (*rescue)->Complete(1, 1); }))
      << "SynchronizeEvent stayed blocked on a killed recorder's event";
  EXPECT_TRUE(synchronized);
  EXPECT_THAT(backend_->QueryEvent(shared.event), IsOkAndHolds(true));
}

TEST_F(AbandonedRecordTest, TheDaemonsOwnRecordOnAKilledClientsEventStillWaitsForItsStream) {
  // The client recorded the event itself, then was killed: its record reads
  // complete. The daemon then records the event on its own stream (held back
  // by the gate): that record is the daemon's, which lives, so it stays
  // pending until the stream runs it, client dead or not.
  const SharedEvent shared = MakeSharedEvent();
  ASSERT_NE(shared.file, nullptr);
  std::unique_ptr<EventPeer> peer = RecordingPeer(*shared.file, 1);
  ASSERT_FALSE(HasFailure());
  absl::StatusOr<BackendEvent> opened = backend_->OpenIpcEventHandle(kDev0, shared.handle);
  ASSERT_OK(opened);
  peer->Kill();
  EXPECT_THAT(backend_->QueryEvent(*opened), IsOkAndHolds(true));

  ASSERT_OK(gate_->HoldBack(stream_));
  ASSERT_OK(backend_->RecordEvent(*opened, stream_));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_THAT(backend_->QueryEvent(*opened), IsOkAndHolds(false))
      << "the daemon's own record was taken for the dead client's";
  gate_->Open();
  EXPECT_OK(backend_->SynchronizeEvent(*opened));
  EXPECT_THAT(backend_->QueryEvent(*opened), IsOkAndHolds(true));
}

}  // namespace
}  // namespace gpumux::testing
