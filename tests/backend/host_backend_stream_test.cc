// The host backend's streams and events beyond the conformance suite: pending
// states held back deterministically with a Gate, cross-stream dependencies,
// timing, destruction while work is queued, and thread safety.

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/tensor/rng_fill.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "tests/backend/host_backend_test_util.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr DeviceIndex kDev0(0);
constexpr DeviceIndex kDev1(1);

std::unique_ptr<HostBackend> MakeBackend() {
  absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(HostTestOptions());
  EXPECT_OK(backend);
  return backend.ok() ? *std::move(backend) : nullptr;
}

std::vector<uint8_t> RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(1 + rng() % 255);
  return bytes;
}

std::vector<uint8_t> HostRandom(const RngRequest& request, uint64_t seed, uint64_t offset) {
  std::vector<uint8_t> bytes(request.elements * RngElementSize(request.dtype));
  FillRandom(bytes.data(), request, seed, offset);
  return bytes;
}

class HostStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = MakeBackend();
    ASSERT_NE(backend_, nullptr);
  }

  BackendSegment Segment(DeviceIndex device, uint64_t size) {
    absl::StatusOr<BackendSegment> segment = backend_->AllocateSegment(device, size);
    EXPECT_OK(segment);
    return segment.ok() ? *segment : BackendSegment{};
  }
  BackendStream Stream(DeviceIndex device, int priority = 0) {
    absl::StatusOr<BackendStream> stream = backend_->CreateStream(device, priority);
    EXPECT_OK(stream);
    return stream.ok() ? *stream : BackendStream();
  }
  BackendEvent Event(DeviceIndex device, EventFlags flags = {}) {
    absl::StatusOr<BackendEvent> event = backend_->CreateEvent(device, flags);
    EXPECT_OK(event);
    return event.ok() ? *event : BackendEvent();
  }
  std::unique_ptr<Gate> MakeGate(DeviceIndex device) {
    absl::StatusOr<std::unique_ptr<Gate>> gate = Gate::Create(*backend_, device);
    EXPECT_OK(gate);
    return gate.ok() ? *std::move(gate) : nullptr;
  }
  bool Query(BackendStream stream) {
    absl::StatusOr<bool> idle = backend_->QueryStream(stream);
    EXPECT_OK(idle);
    return idle.ok() && *idle;
  }
  bool QueryEvent(BackendEvent event) {
    absl::StatusOr<bool> done = backend_->QueryEvent(event);
    EXPECT_OK(done);
    return done.ok() && *done;
  }
  std::vector<uint8_t> Read(BackendStream stream, uint64_t address, uint64_t size) {
    std::vector<uint8_t> bytes(size);
    EXPECT_OK(backend_->CopyDeviceToHost(stream, bytes.data(), address, size, nullptr));
    EXPECT_OK(backend_->SynchronizeStream(stream));
    return bytes;
  }

  std::unique_ptr<HostBackend> backend_;
};

TEST_F(HostStreamTest, PriorityRangeIsHoppers) {
  const StreamPriorityRange range = backend_->GetStreamPriorityRange(kDev1);
  EXPECT_EQ(range.least, 0);
  EXPECT_EQ(range.greatest, -5);
  EXPECT_THAT(backend_->CreateStream(kDev1, -6),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside [-5, 0]")));
  EXPECT_THAT(backend_->CreateStream(kDev1, 1), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(HostStreamTest, StreamAndEventHandlesNeverCoincide) {
  const BackendStream stream = Stream(kDev0);
  const BackendEvent event = Event(kDev0);
  EXPECT_NE(stream.value(), event.value());
  EXPECT_THAT(backend_->QueryEvent(BackendEvent(stream.value())),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(backend_->QueryStream(BackendStream(event.value())),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HostStreamTest, SlowFillThenFastMemsetCompleteInOrder) {
  const uint64_t size = 64 * kTestMiB;
  const BackendSegment segment = Segment(kDev0, size);
  const BackendStream stream = Stream(kDev0);
  const RngRequest fill{RngDtype::kF32, RngKind::kUniform, size / 4, 0.0, 1.0};
  ASSERT_OK(backend_->FillRandom(stream, segment.address, fill, 77, 0));
  ASSERT_OK(backend_->Memset(stream, segment.address + 8, 0xee, 16));
  // Queuing returned at once: 64 MiB of random numbers cannot be done yet.
  EXPECT_FALSE(Query(stream));
  ASSERT_OK(backend_->SynchronizeStream(stream));
  EXPECT_TRUE(Query(stream));

  const std::vector<uint8_t> head = Read(stream, segment.address, 64);
  std::vector<uint8_t> expected =
      HostRandom({RngDtype::kF32, RngKind::kUniform, 16, 0.0, 1.0}, 77, 0);
  std::fill(expected.begin() + 8, expected.begin() + 24, 0xee);
  EXPECT_EQ(head, expected) << "the memset ran before the fill finished";
  const std::vector<uint8_t> tail = Read(stream, segment.address + size - 64, 64);
  const std::vector<uint8_t> full = HostRandom(fill, 77, 0);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), full.end() - 64));
}

TEST_F(HostStreamTest, HeldBackWorkIsPendingUntilTheGateOpens) {
  const BackendSegment segment = Segment(kDev0, 4096);
  const BackendStream stream = Stream(kDev0);
  std::unique_ptr<Gate> gate = MakeGate(kDev0);
  ASSERT_NE(gate, nullptr);
  ASSERT_OK(gate->HoldBack(stream));
  const std::vector<uint8_t> data = RandomBytes(1000, 1);
  std::vector<uint8_t> out(1000, 0);
  ASSERT_OK(
      backend_->CopyHostToDevice(stream, segment.address + 7, data.data(), data.size(), nullptr));
  ASSERT_OK(
      backend_->CopyDeviceToHost(stream, out.data(), segment.address + 7, out.size(), nullptr));
  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    EXPECT_OK(backend_->SynchronizeStream(stream));
    synchronized = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(Query(stream));
  EXPECT_FALSE(synchronized) << "SynchronizeStream returned with work pending";
  EXPECT_EQ(out, std::vector<uint8_t>(1000, 0)) << "work ran behind a closed gate";
  gate->Open();
  waiter.join();
  EXPECT_TRUE(synchronized);
  EXPECT_TRUE(Query(stream));
  EXPECT_EQ(out, data);
}

TEST_F(HostStreamTest, StreamWaitEventMakesTheCopyWaitForTheProducer) {
  const uint64_t size = 4 * kTestMiB;
  const BackendSegment x = Segment(kDev0, size);
  const BackendSegment y = Segment(kDev0, size);
  const BackendSegment z = Segment(kDev0, size);
  const BackendStream producer = Stream(kDev0);
  const BackendStream consumer = Stream(kDev0, -5);
  const BackendStream unordered = Stream(kDev0);
  const BackendEvent ready = Event(kDev0);
  std::unique_ptr<Gate> gate = MakeGate(kDev0);
  ASSERT_NE(gate, nullptr);
  const RngRequest request{RngDtype::kU8, RngKind::kBits, size, 0.0, 1.0};
  ASSERT_OK(gate->HoldBack(producer));
  ASSERT_OK(backend_->FillRandom(producer, x.address, request, 3, 0));
  ASSERT_OK(backend_->RecordEvent(ready, producer));
  ASSERT_OK(backend_->StreamWaitEvent(consumer, ready));
  ASSERT_OK(backend_->CopyDeviceToDevice(consumer, kDev0, y.address, kDev0, x.address, size));
  // Without the wait a copy sees the data as it is now: zeros.
  ASSERT_OK(backend_->CopyDeviceToDevice(unordered, kDev0, z.address, kDev0, x.address, size));
  ASSERT_OK(backend_->SynchronizeStream(unordered));
  EXPECT_EQ(Read(unordered, z.address, size), std::vector<uint8_t>(size, 0));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(QueryEvent(ready));
  EXPECT_FALSE(Query(consumer));
  gate->Open();
  ASSERT_OK(backend_->SynchronizeStream(consumer));
  EXPECT_TRUE(QueryEvent(ready));
  EXPECT_EQ(Read(consumer, y.address, size), HostRandom(request, 3, 0));
}

TEST_F(HostStreamTest, WaitCapturesTheRecordAtTheTimeOfTheCall) {
  const BackendSegment segment = Segment(kDev0, 4096);
  const BackendStream a = Stream(kDev0);
  const BackendStream b = Stream(kDev0);
  const BackendEvent event = Event(kDev0);
  std::unique_ptr<Gate> gate = MakeGate(kDev0);
  ASSERT_NE(gate, nullptr);
  // Recorded on idle `a`, then b waits: b must not wait for what a gets later.
  ASSERT_OK(backend_->RecordEvent(event, a));
  ASSERT_OK(backend_->SynchronizeStream(a));
  ASSERT_OK(backend_->StreamWaitEvent(b, event));
  ASSERT_OK(gate->HoldBack(a));
  ASSERT_OK(backend_->RecordEvent(event, a));  // pending behind the gate
  EXPECT_FALSE(QueryEvent(event));
  ASSERT_OK(backend_->Memset(b, segment.address, 1, 16));
  ASSERT_OK(backend_->SynchronizeStream(b));  // would hang if it waited for the new record
  EXPECT_EQ(Read(b, segment.address, 16), std::vector<uint8_t>(16, 1));
  gate->Open();
  ASSERT_OK(backend_->SynchronizeEvent(event));
}

TEST_F(HostStreamTest, TimingEventsMeasureAHeldBackInterval) {
  EventFlags timing;
  timing.enable_timing = true;
  const BackendStream stream = Stream(kDev0);
  const BackendEvent start = Event(kDev0, timing);
  const BackendEvent end = Event(kDev0, timing);
  std::unique_ptr<Gate> gate = MakeGate(kDev0);
  ASSERT_NE(gate, nullptr);
  ASSERT_OK(backend_->RecordEvent(start, stream));
  ASSERT_OK(gate->HoldBack(stream));
  ASSERT_OK(backend_->RecordEvent(end, stream));
  ASSERT_OK(backend_->SynchronizeEvent(start));
  EXPECT_THAT(backend_->ElapsedTimeMs(start, end),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("completed")));
  std::this_thread::sleep_for(milliseconds(100));
  gate->Open();
  ASSERT_OK(backend_->SynchronizeEvent(end));
  absl::StatusOr<float> elapsed = backend_->ElapsedTimeMs(start, end);
  ASSERT_OK(elapsed);
  EXPECT_GE(*elapsed, 99.0f);
  EXPECT_LT(*elapsed, 1000.0f);
  absl::StatusOr<float> reversed = backend_->ElapsedTimeMs(end, start);
  ASSERT_OK(reversed);
  EXPECT_FLOAT_EQ(*reversed, -*elapsed);
}

TEST_F(HostStreamTest, ElapsedTimeErrorsSayWhatIsMissing) {
  EventFlags timing;
  timing.enable_timing = true;
  const BackendStream stream = Stream(kDev0);
  const BackendEvent timed = Event(kDev0, timing);
  const BackendEvent never = Event(kDev0, timing);
  ASSERT_OK(backend_->RecordEvent(timed, stream));
  ASSERT_OK(backend_->SynchronizeStream(stream));
  EXPECT_THAT(backend_->ElapsedTimeMs(timed, never),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "Both events must be recorded before calculating elapsed time."));
}

TEST_F(HostStreamTest, SynchronizeEventBlocksUntilTheRecordCompletes) {
  const BackendStream stream = Stream(kDev0);
  EventFlags blocking;
  blocking.blocking = true;
  const BackendEvent event = Event(kDev0, blocking);
  std::unique_ptr<Gate> gate = MakeGate(kDev0);
  ASSERT_NE(gate, nullptr);
  ASSERT_OK(gate->HoldBack(stream));
  ASSERT_OK(backend_->RecordEvent(event, stream));
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    EXPECT_OK(backend_->SynchronizeEvent(event));
    done = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(done);
  EXPECT_FALSE(QueryEvent(event));
  gate->Open();
  waiter.join();
  EXPECT_TRUE(QueryEvent(event));
}

TEST_F(HostStreamTest, DestroyStreamReturnsAtOnceAndItsWorkStillRuns) {
  const BackendSegment segment = Segment(kDev1, 4096);
  const BackendStream stream = Stream(kDev1);
  std::unique_ptr<Gate> gate = MakeGate(kDev1);
  ASSERT_NE(gate, nullptr);
  ASSERT_OK(gate->HoldBack(stream));
  ASSERT_OK(backend_->Memset(stream, segment.address, 0x42, 4096));
  ASSERT_OK(backend_->DestroyStream(stream));  // with its work held back: must not block
  EXPECT_THAT(backend_->Memset(stream, segment.address, 0, 1),
              StatusIs(absl::StatusCode::kNotFound));
  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    EXPECT_OK(backend_->Synchronize(kDev1));
    synchronized = true;
  });
  EXPECT_OK(backend_->Synchronize(kDev0)) << "the other device has nothing pending";
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_FALSE(synchronized) << "Synchronize(device) ignored a destroyed stream's work";
  gate->Open();
  waiter.join();
  EXPECT_EQ(Read(Stream(kDev1), segment.address, 4096), std::vector<uint8_t>(4096, 0x42));
}

TEST_F(HostStreamTest, ReleasingASegmentWithQueuedWorkIsSafe) {
  const BackendSegment segment = Segment(kDev0, 8 * kTestMiB);
  const BackendStream stream = Stream(kDev0);
  std::unique_ptr<Gate> gate = MakeGate(kDev0);
  ASSERT_NE(gate, nullptr);
  ASSERT_OK(backend_->Memset(stream, segment.address, 1, 16));  // maps the segment
  ASSERT_OK(gate->HoldBack(stream));
  ASSERT_OK(backend_->Memset(stream, segment.address, 2, 8 * kTestMiB));
  ASSERT_OK(backend_->ReleaseSegment(kDev0, segment.address));
  EXPECT_THAT(backend_->Memset(stream, segment.address, 3, 16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  gate->Open();
  EXPECT_OK(backend_->SynchronizeStream(stream));  // wrote into the still-mapped file
  EXPECT_THAT(backend_->memory_files().Find(segment.handle.data, MemoryFileTable::kAnySession),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HostStreamTest, FillRandomNormalIsTheHostGeneratorsOutput) {
  const BackendSegment segment = Segment(kDev1, kTestMiB);
  const BackendStream stream = Stream(kDev1);
  for (RngDtype dtype : {RngDtype::kF32, RngDtype::kF64, RngDtype::kF16, RngDtype::kBF16}) {
    const RngRequest request{dtype, RngKind::kNormal, 1001, 0.5, 2.0};
    ASSERT_OK(backend_->FillRandom(stream, segment.address + 1, request, 9, 16));
    EXPECT_EQ(Read(stream, segment.address + 1, request.elements * RngElementSize(dtype)),
              HostRandom(request, 9, 16))
        << "dtype " << static_cast<int>(dtype);
  }
}

TEST_F(HostStreamTest, OpenedInterprocessEventWorksInTheSameProcess) {
  EventFlags ipc;
  ipc.interprocess = true;
  const BackendEvent created = Event(kDev0, ipc);
  absl::StatusOr<std::string> handle = backend_->GetIpcEventHandle(created);
  ASSERT_OK(handle);
  // Its device is the creator's: another is refused, as CUDA refuses it.
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev1, *handle),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<BackendEvent> opened = backend_->OpenIpcEventHandle(kDev0, *handle);
  ASSERT_OK(opened);
  absl::StatusOr<std::string> reshared = backend_->GetIpcEventHandle(*opened);
  ASSERT_OK(reshared);
  EXPECT_EQ(*reshared, *handle);
  // Recorded through the opened copy, seen through the original.
  const BackendStream stream = Stream(kDev0);
  std::unique_ptr<Gate> gate = MakeGate(kDev0);
  ASSERT_NE(gate, nullptr);
  ASSERT_OK(gate->HoldBack(stream));
  ASSERT_OK(backend_->RecordEvent(*opened, stream));
  EXPECT_FALSE(QueryEvent(created));
  gate->Open();
  ASSERT_OK(backend_->SynchronizeEvent(created));
  EXPECT_TRUE(QueryEvent(*opened));
  // The creator's handle owns the key: destroying it ends the handle, the
  // opened copy keeps working.
  ASSERT_OK(backend_->DestroyEvent(created));
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev0, *handle), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(backend_->RecordEvent(*opened, stream));
  EXPECT_OK(backend_->SynchronizeEvent(*opened));
}

TEST_F(HostStreamTest, UnknownAndMalformedIpcHandles) {
  const BackendSegment segment = Segment(kDev0, 4096);
  EventFlags ipc;
  ipc.interprocess = true;
  absl::StatusOr<std::string> handle = backend_->GetIpcEventHandle(Event(kDev0, ipc));
  ASSERT_OK(handle);
  const auto kInvalid = StatusIs(absl::StatusCode::kInvalidArgument);
  std::string wrong_tag = *handle;
  wrong_tag[0] ^= 1;
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev0, wrong_tag), kInvalid);
  std::string dirty_padding = *handle;
  dirty_padding.back() = 'x';
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev0, dirty_padding), kInvalid);
  std::string upper = *handle;
  upper[10] = 'G';
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev0, upper), kInvalid);
  std::string unknown = *handle;
  unknown[39] = unknown[39] == 'a' ? 'b' : 'a';  // last hex digit of the key
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev0, unknown), StatusIs(absl::StatusCode::kNotFound));
  // A segment's key in an event handle names no event.
  const std::string segment_as_event = MakeHostIpcEventHandle(segment.handle.data);
  EXPECT_THAT(backend_->OpenIpcEventHandle(kDev0, segment_as_event),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("names no live event")));
}

TEST(HostBackendShutdownTest, DestructorRunsQueuedWorkAndAbandonsForeignWaits) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<BackendSegment> segment = backend->AllocateSegment(kDev0, 16 * kTestMiB);
  absl::StatusOr<BackendStream> busy = backend->CreateStream(kDev0, 0);
  absl::StatusOr<BackendStream> stuck = backend->CreateStream(kDev0, 0);
  ASSERT_OK(segment);
  ASSERT_OK(busy);
  ASSERT_OK(stuck);
  const RngRequest request{RngDtype::kF32, RngKind::kUniform, 4 * kTestMiB, 0.0, 1.0};
  auto out = std::make_shared<std::vector<uint8_t>>(64);
  ASSERT_OK(backend->FillRandom(*busy, segment->address, request, 4, 0));
  ASSERT_OK(backend->CopyDeviceToHost(*busy, out->data(), segment->address + 16 * kTestMiB - 64, 64,
                                      out));
  // A wait on an interprocess event another process never completes.
  absl::StatusOr<std::unique_ptr<Gate>> never = Gate::Create(*backend, kDev0);
  ASSERT_OK(never);
  ASSERT_OK((*never)->HoldBack(*stuck));
  auto late = std::make_shared<std::vector<uint8_t>>(16, 0);
  ASSERT_OK(backend->CopyDeviceToHost(*stuck, late->data(), segment->address, 16, late));
  const auto start = Clock::now();
  backend.reset();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  const std::vector<uint8_t> full = HostRandom(request, 4, 0);
  EXPECT_TRUE(std::equal(out->begin(), out->end(), full.end() - 64)) << "queued work did not run";
  EXPECT_EQ(out.use_count(), 1);
  EXPECT_EQ(late.use_count(), 1) << "work behind the abandoned wait still runs";
}

TEST_F(HostStreamTest, ConcurrentStreamsEventsAndCopiesFromManyThreads) {
  const BackendSegment segment = Segment(kDev0, 8 * kTestMiB);
  const BackendSegment other = Segment(kDev1, 8 * kTestMiB);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // `stream` (device 1) copies what `helper` (device 0) wrote across
      // devices and back to the host, ordered by an event.
      const BackendStream stream = Stream(kDev1, -(t % 6));
      const BackendStream helper = Stream(kDev0);
      const BackendEvent event = Event(kDev1);
      const uint64_t mine = segment.address + static_cast<uint64_t>(t) * 2 * kTestMiB;
      const uint64_t theirs = other.address + static_cast<uint64_t>(t) * 2 * kTestMiB;
      for (int i = 0; i < 40; ++i) {
        const std::vector<uint8_t> data =
            RandomBytes(1000 + static_cast<size_t>(i) * 37, t * 1000 + i);
        std::vector<uint8_t> out(data.size());
        EXPECT_OK(backend_->CopyHostToDevice(helper, mine, data.data(), data.size(), nullptr));
        const BackendEvent written = Event(kDev0);
        EXPECT_OK(backend_->RecordEvent(written, helper));
        EXPECT_OK(backend_->StreamWaitEvent(stream, written));
        EXPECT_OK(backend_->DestroyEvent(written));
        EXPECT_OK(backend_->CopyDeviceToDevice(stream, kDev1, theirs, kDev0, mine, data.size()));
        EXPECT_OK(backend_->CopyDeviceToHost(stream, out.data(), theirs, out.size(), nullptr));
        EXPECT_OK(backend_->RecordEvent(event, stream));
        EXPECT_OK(backend_->SynchronizeEvent(event));
        if (out != data) ++mismatches;
      }
      EXPECT_OK(backend_->DestroyStream(stream));
      EXPECT_OK(backend_->DestroyStream(helper));
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace gpumux::testing
