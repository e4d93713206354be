// PyTorch's stream semantics for reuse, over a real HostBackend and real
// backend streams: recordStream delays the reuse of a freed block until the
// work queued on the recorded streams completes (active_pending_free), Free
// can wait on caller events, process_events runs per stream without
// head-of-line blocking, synchronize_and_free_events runs in EmptyCache, the
// OOM retry and RemoveClient (waiting for pooled events only: caller events
// are queried, and RemoveClient drops those of the removed client's blocks
// unqueried), the event pool reuses its events, and backend event errors
// neither crash nor leak. Pending work is held back by Gates
// (tests/backend/host_backend_test_util.h), so nothing races a timer; calls
// that must not wait for a caller event run under ReturnsWithin, which fails
// them (rather than hang) when they do.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "allocator/caching_allocator.h"
#include "gmock/gmock.h"
#include "gpumux/common/host_ipc_event.h"
#include "gtest/gtest.h"
#include "server/backend/forwarding_backend.h"
#include "server/backend/host/host_backend.h"
#include "tests/allocator/allocator_test_util.h"
#include "tests/backend/host_backend_test_util.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// Counts the allocator's event calls and can make them fail.
class EventCountingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override {
    absl::MutexLock lock(&mu_);
    created_flags_.push_back(flags);
    return ForwardingBackend::CreateEvent(device, flags);
  }
  absl::Status DestroyEvent(BackendEvent event) override {
    {
      absl::MutexLock lock(&mu_);
      destroyed_.push_back(event);
    }
    return ForwardingBackend::DestroyEvent(event);
  }
  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override {
    ++records_;
    if (fail_record_) return absl::InternalError("injected record failure");
    return ForwardingBackend::RecordEvent(event, stream);
  }
  absl::StatusOr<bool> QueryEvent(BackendEvent event) override {
    ++queries_;
    if (fail_query_) return absl::InternalError("injected query failure");
    return ForwardingBackend::QueryEvent(event);
  }
  absl::Status SynchronizeEvent(BackendEvent event) override {
    ++syncs_;
    if (fail_sync_) return absl::InternalError("injected synchronize failure");
    return ForwardingBackend::SynchronizeEvent(event);
  }

  std::vector<EventFlags> created_flags() const {
    absl::MutexLock lock(&mu_);
    return created_flags_;
  }
  std::vector<BackendEvent> destroyed() const {
    absl::MutexLock lock(&mu_);
    return destroyed_;
  }

  std::atomic<int> records_{0}, queries_{0}, syncs_{0};
  std::atomic<bool> fail_record_{false}, fail_query_{false}, fail_sync_{false};

 private:
  mutable absl::Mutex mu_;
  std::vector<EventFlags> created_flags_ ABSL_GUARDED_BY(mu_);
  std::vector<BackendEvent> destroyed_ ABSL_GUARDED_BY(mu_);
};

class AllocatorStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override { Init(256 * kMiB); }
  void TearDown() override {
    allocator_.reset();
    gates_.clear();  // opens them, so the backend's streams drain
    client_events_.clear();
    events_.reset();
    host_.reset();
  }

  void Init(uint64_t device_memory) {
    allocator_.reset();
    gates_.clear();
    events_.reset();
    host_.reset();
    released_.clear();
    HostBackend::Options options;
    options.device_count = 1;
    options.device_memory = device_memory;
    absl::StatusOr<std::unique_ptr<HostBackend>> host = HostBackend::Create(options);
    ASSERT_OK(host);
    host_ = std::move(*host);
    events_ = std::make_unique<EventCountingBackend>(host_.get());
    allocator_ = std::make_unique<CachingAllocator>(
        events_.get(), AllocatorOptions{},
        [this](DeviceIndex, SegmentId id) { released_.push_back(id); });
  }

  BackendStream NewStream() {
    absl::StatusOr<BackendStream> stream = host_->CreateStream(kDev, 0);
    EXPECT_OK(stream);
    return stream.ok() ? *stream : BackendStream();
  }
  // Holds back the work queued on `stream` from now on until the gate opens.
  Gate* HoldBack(BackendStream stream) {
    absl::StatusOr<std::unique_ptr<Gate>> gate = Gate::Create(*host_, kDev);
    EXPECT_OK(gate);
    if (!gate.ok()) return nullptr;
    EXPECT_OK((*gate)->HoldBack(stream));
    gates_.push_back(std::move(*gate));
    return gates_.back().get();
  }
  // An interprocess event of the daemon that a client process recorded on
  // its own stream (through HostIpcEvent, as the client library does),
  // opened by the daemon from its handle. Nothing completes it unless the test does:
  // it stands for a client killed before that work ran.
  struct ClientEvent {
    std::unique_ptr<HostIpcEvent> ipc;  // the client's side
    uint64_t generation = 0;
    BackendEvent opened;  // the daemon's, for Free's wait_for
    void Complete() const { ipc->Complete(generation, 0); }
  };
  const ClientEvent* RecordInClient() {
    EventFlags flags;
    flags.interprocess = true;
    absl::StatusOr<BackendEvent> created = host_->CreateEvent(kDev, flags);
    EXPECT_OK(created);
    if (!created.ok()) return nullptr;
    absl::StatusOr<std::string> handle = host_->GetIpcEventHandle(*created);
    EXPECT_OK(handle);
    if (!handle.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<HostIpcEvent>> ipc =
        gpumux::testing::OpenBackendEvent(*host_, *handle);
    EXPECT_OK(ipc);
    if (!ipc.ok()) return nullptr;
    auto event = std::make_unique<ClientEvent>();
    event->ipc = std::move(*ipc);
    event->generation = event->ipc->Record();
    absl::StatusOr<BackendEvent> opened = host_->OpenIpcEventHandle(kDev, *handle);
    EXPECT_OK(opened);
    if (!opened.ok()) return nullptr;
    event->opened = *opened;
    client_events_.push_back(std::move(event));
    return client_events_.back().get();
  }
  // Work on `stream` that touches the block (the reason to record the stream).
  void Touch(BackendStream stream, const AllocationResult& r) {
    EXPECT_OK(host_->Memset(stream, r.address, 0xab, std::min<uint64_t>(r.size, 4096)));
  }

  AllocationResult Alloc(uint64_t size, ClientId client = kA, StreamId stream = kS0,
                         bool dedicated = false) {
    absl::StatusOr<AllocationResult> r =
        allocator_->Allocate(kDev, client, stream, size, dedicated);
    EXPECT_OK(r);
    return r.ok() ? *r : AllocationResult{};
  }
  void Free(const AllocationResult& r) { allocator_->Free(kDev, r.address); }
  DeviceStats Stats() const { return allocator_->GetStats(kDev); }
  DeviceStats StatsOf(ClientId client) const { return allocator_->GetClientStats(kDev, client); }
  std::vector<SegmentSnapshot> Segments() const { return allocator_->Snapshot(kDev, std::nullopt); }
  // The snapshot state of the block at `address`, if a block starts there.
  std::optional<BlockState> StateAt(uint64_t address) const {
    for (const SegmentSnapshot& s : Segments()) {
      for (const BlockSnapshot& b : s.blocks) {
        if (b.address == address) return b.state;
      }
    }
    return std::nullopt;
  }
  void ExpectBooksConsistent() const {
    const std::vector<SegmentSnapshot> segments = Segments();
    ExpectConsistent(Stats(), segments, std::nullopt);
    for (ClientId c : {kA, kB}) ExpectConsistent(StatsOf(c), segments, c);
  }

  std::unique_ptr<HostBackend> host_;
  std::unique_ptr<EventCountingBackend> events_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::vector<std::unique_ptr<Gate>> gates_;
  std::vector<std::unique_ptr<ClientEvent>> client_events_;
  std::vector<SegmentId> released_;
};

// Opens `gate` from another thread after a moment, noting that it did, so a
// test can tell that a call waited for the gated work.
class DelayedOpener {
 public:
  explicit DelayedOpener(Gate* gate)
      : thread_([this, gate] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          opened_.store(true);
          gate->Open();
        }) {}
  ~DelayedOpener() { thread_.join(); }
  bool opened() const { return opened_.load(); }

 private:
  std::atomic<bool> opened_{false};
  std::thread thread_;
};

TEST_F(AllocatorStreamsTest, RecordStreamDelaysReuseUntilTheRecordedWorkCompletes) {
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const AllocationResult small = Alloc(512 * kKiB);
  Touch(side, small);
  allocator_->RecordStream(kDev, small.address, kS1, side);
  allocator_->Free(kDev, small.address);

  EXPECT_EQ(StateAt(small.address), BlockState::kActivePendingFree);
  DeviceStats s = Stats();
  EXPECT_EQ(s.allocation[kAggregate].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.active[kSmallPool].current, 1);
  EXPECT_EQ(s.active_bytes[kSmallPool].current, static_cast<int64_t>(512 * kKiB));
  EXPECT_EQ(s.requested_bytes[kAggregate].current, static_cast<int64_t>(512 * kKiB));
  ExpectBooksConsistent();
  for (const SegmentSnapshot& seg : Segments()) {
    EXPECT_EQ(seg.allocated_size, 0u);
    EXPECT_EQ(seg.active_size, 512 * kKiB);
    EXPECT_EQ(seg.blocks[0].client, kA);
  }

  // The side stream's work is pending: the same request gets other memory.
  const AllocationResult again = Alloc(512 * kKiB);
  EXPECT_NE(again.address, small.address);
  EXPECT_EQ(StateAt(small.address), BlockState::kActivePendingFree);
  EXPECT_EQ(Stats().active[kAggregate].current, 2);
  EXPECT_EQ(Stats().allocation[kAggregate].current, 1);
  ExpectBooksConsistent();
  allocator_->Free(kDev, again.address);

  gate->Open();
  ASSERT_OK(host_->SynchronizeStream(side));
  EXPECT_EQ(StateAt(small.address), BlockState::kActivePendingFree);  // until the next Allocate
  const AllocationResult reused = Alloc(512 * kKiB);  // process_events frees it first
  EXPECT_EQ(reused.address, small.address);
  EXPECT_EQ(Stats().active[kAggregate].current, 1);
  EXPECT_EQ(Stats().num_device_alloc, 1);
  ExpectBooksConsistent();
  allocator_->Free(kDev, reused.address);
  // One event from the pool, kept for reuse rather than destroyed.
  EXPECT_EQ(events_->created_flags().size(), 1u);
  EXPECT_TRUE(events_->destroyed().empty());
}

TEST_F(AllocatorStreamsTest, RecordingTheAllocationStreamOrTwiceTheSameStreamIsIgnored) {
  const BackendStream side = NewStream();
  HoldBack(side);
  const AllocationResult r = Alloc(kMiB);
  allocator_->RecordStream(kDev, r.address, kS0, side);  // its own stream: ignored
  allocator_->Free(kDev, r.address);
  EXPECT_EQ(StateAt(r.address), BlockState::kInactive);
  EXPECT_EQ(Alloc(kMiB).address, r.address);
  EXPECT_EQ(events_->records_.load(), 0);

  const AllocationResult twice = Alloc(kMiB, kA, kS1);
  const BackendStream other = NewStream();
  allocator_->RecordStream(kDev, twice.address, kS0, other);
  allocator_->RecordStream(kDev, twice.address, kS0, other);
  allocator_->Free(kDev, twice.address);
  EXPECT_EQ(events_->records_.load(), 1);
}

TEST_F(AllocatorStreamsTest, ReuseWaitsForASlowFillOnTheRecordedStream) {
  const BackendStream side = NewStream();
  const AllocationResult big = Alloc(32 * kMiB);
  const AllocationResult small = Alloc(512 * kKiB);
  RngRequest fill;
  fill.elements = 32 * kMiB / 4;  // f32 uniform over all of `big`
  ASSERT_OK(host_->FillRandom(side, big.address, fill, /*seed=*/1, /*offset=*/0));
  Touch(side, small);
  allocator_->RecordStream(kDev, small.address, kS1, side);
  allocator_->Free(kDev, small.address);
  const AllocationResult again = Alloc(512 * kKiB);
  absl::StatusOr<bool> idle = host_->QueryStream(side);
  ASSERT_OK(idle);
  // Still busy after the Allocate means still busy during it: no reuse then.
  if (!*idle) {
    EXPECT_NE(again.address, small.address);
  }
  ASSERT_OK(host_->SynchronizeStream(side));
  allocator_->Free(kDev, again.address);
  EXPECT_EQ(Alloc(512 * kKiB).address, small.address);
  ExpectBooksConsistent();
  allocator_->Free(kDev, big.address);
}

TEST_F(AllocatorStreamsTest, FreeWaitsForCallerEventsAndDestroysThem) {
  const BackendStream client_stream = NewStream();
  Gate* gate = HoldBack(client_stream);
  EventFlags flags;
  flags.interprocess = true;
  absl::StatusOr<BackendEvent> done = host_->CreateEvent(kDev, flags);
  ASSERT_OK(done);
  ASSERT_OK(host_->RecordEvent(*done, client_stream));

  const AllocationResult r = Alloc(3 * kMiB);
  const BackendEvent wait_for[] = {*done};
  allocator_->Free(kDev, r.address, wait_for);
  EXPECT_EQ(StateAt(r.address), BlockState::kActivePendingFree);
  EXPECT_EQ(Stats().active_bytes[kLargePool].current, static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(Stats().allocated_bytes[kLargePool].current, 0);
  ExpectBooksConsistent();
  const AllocationResult again = Alloc(3 * kMiB);
  EXPECT_NE(again.address, r.address);
  allocator_->Free(kDev, again.address);
  EXPECT_THAT(events_->destroyed(), Not(Contains(*done)));

  gate->Open();
  ASSERT_OK(host_->SynchronizeStream(client_stream));
  EXPECT_EQ(Alloc(3 * kMiB).address, r.address);
  EXPECT_THAT(events_->destroyed(), ElementsAre(*done));
  EXPECT_THAT(host_->QueryEvent(*done), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(events_->created_flags().empty());  // none taken from the pool
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, PerStreamQueuesDoNotBlockEachOther) {
  const BackendStream slow = NewStream();
  const BackendStream fast = NewStream();
  HoldBack(slow);
  const AllocationResult first = Alloc(512 * kKiB);
  const AllocationResult second = Alloc(512 * kKiB);
  allocator_->RecordStream(kDev, first.address, kS1, slow);
  allocator_->RecordStream(kDev, second.address, kS1, fast);
  allocator_->Free(kDev, first.address);  // queued first, completes last
  allocator_->Free(kDev, second.address);
  ASSERT_OK(host_->SynchronizeStream(fast));
  EXPECT_EQ(Alloc(512 * kKiB).address, second.address);
  EXPECT_EQ(StateAt(first.address), BlockState::kActivePendingFree);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, PendingNeighboursDoNotCoalesceUntilTheyAreFreed) {
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const AllocationResult a = Alloc(512 * kKiB);
  const AllocationResult b = Alloc(512 * kKiB);
  allocator_->RecordStream(kDev, a.address, kS1, side);
  allocator_->Free(kDev, a.address);
  allocator_->Free(kDev, b.address);  // merges with the free tail, not with `a`
  ASSERT_EQ(Segments().size(), 1u);
  ASSERT_EQ(Segments()[0].blocks.size(), 2u);
  EXPECT_EQ(Segments()[0].blocks[1].size, 2 * kMiB - 512 * kKiB);
  EXPECT_EQ(Stats().inactive_split[kAggregate].current, 1);
  ExpectBooksConsistent();
  gate->Open();
  ASSERT_OK(host_->SynchronizeStream(side));
  Free(Alloc(512 * kKiB));  // runs process_events, then merges back
  const std::vector<SegmentSnapshot> segments = Segments();
  ASSERT_EQ(segments[0].blocks.size(), 1u);
  EXPECT_EQ(segments[0].blocks[0].size, 2 * kMiB);
  EXPECT_EQ(Stats().inactive_split[kAggregate].current, 0);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, EmptyCacheWaitsForPendingFreesAndReleasesTheirSegments) {
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const AllocationResult r = Alloc(kKiB);
  allocator_->RecordStream(kDev, r.address, kS1, side);
  allocator_->Free(kDev, r.address);
  EmptyCacheResult emptied;
  {
    DelayedOpener opener(gate);
    emptied = allocator_->EmptyCache(kDev, std::nullopt);
    EXPECT_TRUE(opener.opened()) << "EmptyCache returned before the recorded work completed";
  }
  EXPECT_EQ(emptied.released_segments, 1u);
  EXPECT_THAT(released_, ElementsAre(r.segment_id));
  EXPECT_EQ(Stats().num_sync_all_streams, 1);
  EXPECT_EQ(Stats().active[kAggregate].current, 0);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_GE(events_->syncs_.load(), 1);
}

TEST_F(AllocatorStreamsTest, OutOfMemoryRetryWaitsForPendingFrees) {
  Init(64 * kMiB);
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const AllocationResult big = Alloc(60 * kMiB);
  const AllocationResult small = Alloc(kKiB);  // a 2 MiB segment: 62 MiB reserved
  allocator_->RecordStream(kDev, small.address, kS1, side);
  allocator_->Free(kDev, small.address);
  {
    DelayedOpener opener(gate);
    // 4 MiB fit only once the pending block's segment is released.
    const AllocationResult dedicated = Alloc(3 * kMiB, kA, kS0, /*dedicated=*/true);
    EXPECT_TRUE(opener.opened());
    EXPECT_EQ(dedicated.size, 4 * kMiB);
    allocator_->Free(kDev, dedicated.address);
  }
  EXPECT_THAT(released_, Contains(small.segment_id));
  EXPECT_EQ(Stats().num_sync_all_streams, 1);
  EXPECT_EQ(Stats().num_alloc_retries, 1);
  EXPECT_EQ(Stats().num_ooms, 0);
  allocator_->Free(kDev, big.address);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, EmptyCacheWaitsForDaemonStreamsButOnlyQueriesCallerEvents) {
  // One block both recorded on a daemon stream with gated work and freed
  // with a client's event that does not complete (a client that hangs, or
  // was killed): EmptyCache waits for the daemon stream, queries the
  // client's event and leaves the block pending, its segment unreleased.
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const ClientEvent* hung = RecordInClient();
  ASSERT_NE(hung, nullptr);
  const AllocationResult r = Alloc(3 * kMiB);
  Touch(side, r);
  allocator_->RecordStream(kDev, r.address, kS1, side);
  const BackendEvent wait_for[] = {hung->opened};
  allocator_->Free(kDev, r.address, wait_for);
  const AllocationResult cached = Alloc(kKiB);
  allocator_->Free(kDev, cached.address);

  EmptyCacheResult emptied;
  bool waited = false;
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1),
      [&] {
        DelayedOpener opener(gate);
        emptied = allocator_->EmptyCache(kDev, std::nullopt);
        waited = opener.opened();
      },
      [&] { hung->Complete(); }))
      << "EmptyCache waited for a client's event";
  EXPECT_TRUE(waited) << "EmptyCache returned before the recorded daemon work completed";
  EXPECT_EQ(events_->syncs_.load(), 1);  // the pooled event only
  EXPECT_EQ(emptied.released_segments, 1u);
  EXPECT_THAT(released_, ElementsAre(cached.segment_id));
  EXPECT_EQ(StateAt(r.address), BlockState::kActivePendingFree);
  EXPECT_THAT(events_->destroyed(), Not(Contains(hung->opened)));
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(Stats().active[kAggregate].current, 1);
  ExpectBooksConsistent();

  // Once it completed, the next EmptyCache retires it by a query.
  hung->Complete();
  emptied = allocator_->EmptyCache(kDev, kA);
  EXPECT_EQ(emptied.released_segments, 1u);
  EXPECT_THAT(released_, ElementsAre(cached.segment_id, r.segment_id));
  EXPECT_EQ(events_->syncs_.load(), 1);
  EXPECT_THAT(events_->destroyed(), ElementsAre(hung->opened));
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(Stats().active[kAggregate].current, 0);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, OutOfMemoryRetryDoesNotWaitForCallerEvents) {
  Init(64 * kMiB);
  const ClientEvent* hung = RecordInClient();
  ASSERT_NE(hung, nullptr);
  const AllocationResult big = Alloc(60 * kMiB);
  const AllocationResult small = Alloc(kKiB);  // a 2 MiB segment: 62 MiB reserved
  const BackendEvent wait_for[] = {hung->opened};
  allocator_->Free(kDev, small.address, wait_for);

  absl::StatusOr<AllocationResult> dedicated;
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1),
      [&] { dedicated = allocator_->Allocate(kDev, kA, kS0, 3 * kMiB, /*dedicated=*/true); },
      [&] { hung->Complete(); }))
      << "the OOM retry waited for a client's event";
  // The pending block is not releasable, so 4 MiB do not fit.
  ASSERT_THAT(dedicated, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(events_->syncs_.load(), 0);
  EXPECT_THAT(released_, Not(Contains(small.segment_id)));
  EXPECT_EQ(StateAt(small.address), BlockState::kActivePendingFree);
  EXPECT_EQ(Stats().num_alloc_retries, 1);
  EXPECT_EQ(Stats().num_ooms, 1);
  ExpectBooksConsistent();

  hung->Complete();  // now the block is freed first, and the retry releases its segment
  const AllocationResult fits = Alloc(3 * kMiB, kA, kS0, /*dedicated=*/true);
  EXPECT_EQ(fits.size, 4 * kMiB);
  EXPECT_THAT(released_, Contains(small.segment_id));
  EXPECT_THAT(events_->destroyed(), ElementsAre(hung->opened));
  allocator_->Free(kDev, fits.address);
  allocator_->Free(kDev, big.address);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, RemoveClientWaitsOnlyForItsOwnPendingFrees) {
  const BackendStream b_stream = NewStream();
  const BackendStream a_stream = NewStream();
  Gate* b_gate = HoldBack(b_stream);
  HoldBack(a_stream);  // stays closed: A's pending free must not hold B up
  const AllocationResult of_a = Alloc(kMiB, kA);
  const AllocationResult of_b = Alloc(kMiB, kB);
  allocator_->RecordStream(kDev, of_a.address, kS1, a_stream);
  allocator_->RecordStream(kDev, of_b.address, kS1, b_stream);
  allocator_->Free(kDev, of_a.address);
  allocator_->Free(kDev, of_b.address);
  {
    DelayedOpener opener(b_gate);
    allocator_->RemoveClient(kB);
    EXPECT_TRUE(opener.opened());
  }
  EXPECT_EQ(events_->syncs_.load(), 1);  // not A's (it would hang on A's closed gate)
  EXPECT_THAT(released_, ElementsAre(of_b.segment_id));
  const DeviceStats b = StatsOf(kB);  // forgotten: zeros
  EXPECT_EQ(b.active[kAggregate].current, 0);
  EXPECT_EQ(b.num_device_alloc, 0);
  EXPECT_EQ(StateAt(of_a.address), BlockState::kActivePendingFree);
  EXPECT_EQ(Stats().active[kAggregate].current, 1);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, RemoveClientDropsItsCallerEventsWithoutWaiting) {
  // Two kinds of never-completing event: one a killed client recorded on
  // its own stream, and one recorded on a stream stuck behind such an event.
  const ClientEvent* killed = RecordInClient();
  ASSERT_NE(killed, nullptr);
  const BackendStream stuck_stream = NewStream();
  Gate* stuck_gate = HoldBack(stuck_stream);
  BackendEvent stuck[2];  // Free takes ownership: one per block
  for (BackendEvent& event : stuck) {
    absl::StatusOr<BackendEvent> created = host_->CreateEvent(kDev, EventFlags{});
    ASSERT_OK(created);
    ASSERT_OK(host_->RecordEvent(*created, stuck_stream));
    event = *created;
  }

  const AllocationResult r1 = Alloc(3 * kMiB);
  const AllocationResult r2 = Alloc(kKiB);
  const BackendEvent both[] = {killed->opened, stuck[0]};
  allocator_->Free(kDev, r1.address, both);
  const BackendEvent one[] = {stuck[1]};
  allocator_->Free(kDev, r2.address, one);
  ASSERT_EQ(StateAt(r1.address), BlockState::kActivePendingFree);
  ASSERT_EQ(StateAt(r2.address), BlockState::kActivePendingFree);
  ASSERT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(22 * kMiB));

  const absl::Time start = absl::Now();
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1), [&] { allocator_->RemoveClient(kA); },
      [&] {
        killed->Complete();
        stuck_gate->Open();
      }))
      << "RemoveClient waited for a removed client's own events";
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));

  EXPECT_EQ(events_->syncs_.load(), 0);
  EXPECT_THAT(released_, UnorderedElementsAre(r1.segment_id, r2.segment_id));
  EXPECT_THAT(events_->destroyed(), UnorderedElementsAre(killed->opened, stuck[0], stuck[1]));
  EXPECT_THAT(host_->QueryEvent(killed->opened), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);  // forgotten: zeros
  const DeviceStats s = Stats();
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.active[kAggregate].current, 0);
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
  EXPECT_TRUE(Segments().empty());
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, RemoveClientStillWaitsForRecordedDaemonStreams) {
  // One block both recorded on a daemon stream with slow (gated) work and
  // freed with a killed client's event: only the daemon stream is waited for.
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const ClientEvent* killed = RecordInClient();
  ASSERT_NE(killed, nullptr);
  const AllocationResult r = Alloc(3 * kMiB);
  Touch(side, r);
  allocator_->RecordStream(kDev, r.address, kS1, side);
  const BackendEvent wait_for[] = {killed->opened};
  allocator_->Free(kDev, r.address, wait_for);
  const AllocationResult other = Alloc(kKiB, kB);  // a live client's, untouched

  bool waited = false;
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1),
      [&] {
        DelayedOpener opener(gate);
        allocator_->RemoveClient(kA);
        waited = opener.opened();
      },
      [&] { killed->Complete(); }));
  EXPECT_TRUE(waited) << "RemoveClient returned before the recorded daemon work completed";
  EXPECT_EQ(events_->syncs_.load(), 1);  // the pooled event only
  EXPECT_THAT(released_, ElementsAre(r.segment_id));
  EXPECT_THAT(events_->destroyed(), ElementsAre(killed->opened));
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(StateAt(other.address), BlockState::kActiveAllocated);
  ExpectBooksConsistent();
  allocator_->Free(kDev, other.address);
}

TEST_F(AllocatorStreamsTest, RemovingAnOwnerNeitherWaitsForNorDropsALiveChargedClientsEvents) {
  // A's segment, block recharged to B (A's shared allocation, B imported it);
  // B frees it with an event of its own that has not completed. A's removal
  // does not wait for it (B may never complete it) nor drop it (B lives: the
  // selection is by charged client, not by owner): the block, A's segment
  // and A's books stay until it completes.
  const ClientEvent* b_event = RecordInClient();
  ASSERT_NE(b_event, nullptr);
  const AllocationResult r = Alloc(3 * kMiB, kA);
  allocator_->Recharge(kDev, r.address, kB);
  const BackendEvent wait_for[] = {b_event->opened};
  allocator_->Free(kDev, r.address, wait_for);
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1), [&] { allocator_->RemoveClient(kA); }, [&] { b_event->Complete(); }))
      << "A's removal waited for live client B's event";
  EXPECT_EQ(events_->syncs_.load(), 0);
  EXPECT_TRUE(released_.empty());
  EXPECT_THAT(events_->destroyed(), Not(Contains(b_event->opened)));
  EXPECT_EQ(StateAt(r.address), BlockState::kActivePendingFree);
  EXPECT_EQ(StatsOf(kA).reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  ExpectBooksConsistent();

  b_event->Complete();
  Free(Alloc(kKiB, kB));  // process_events: the block's segment goes, and A's books with it
  EXPECT_THAT(released_, Contains(r.segment_id));
  EXPECT_THAT(events_->destroyed(), ElementsAre(b_event->opened));
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);  // forgotten: zeros
  EXPECT_EQ(StatsOf(kB).active[kAggregate].current, 0);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, AKilledImportersCallerEventsDoNotHoldARemovedOwnersSegment) {
  // A's segment, block recharged to B; A leaves (its books linger for the
  // segment); B frees the block with an event and is killed before it ran.
  const ClientEvent* killed = RecordInClient();
  ASSERT_NE(killed, nullptr);
  const AllocationResult r = Alloc(3 * kMiB, kA);
  allocator_->Recharge(kDev, r.address, kB);
  allocator_->RemoveClient(kA);
  const BackendEvent wait_for[] = {killed->opened};
  allocator_->Free(kDev, r.address, wait_for);
  EXPECT_TRUE(released_.empty());
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(1), [&] { allocator_->RemoveClient(kB); }, [&] { killed->Complete(); }));
  EXPECT_EQ(events_->syncs_.load(), 0);
  EXPECT_THAT(released_, ElementsAre(r.segment_id));
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);  // A's books went with the segment
  EXPECT_EQ(StatsOf(kB).active[kAggregate].current, 0);
  EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, PendingFreeOfARemovedOwnersSegmentReleasesItWhenDone) {
  // A's segment, block recharged to B; A leaves; B frees it after a side use.
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const AllocationResult r = Alloc(3 * kMiB, kA, kS0, /*dedicated=*/false);
  allocator_->Recharge(kDev, r.address, kB);
  allocator_->RemoveClient(kA);
  allocator_->RecordStream(kDev, r.address, kS1, side);
  allocator_->Free(kDev, r.address);
  EXPECT_TRUE(released_.empty());
  EXPECT_EQ(StatsOf(kB).active[kAggregate].current, 1);
  ExpectBooksConsistent();
  gate->Open();
  ASSERT_OK(host_->SynchronizeStream(side));
  Free(Alloc(kKiB, kB));  // process_events
  EXPECT_THAT(released_, Contains(r.segment_id));
  EXPECT_EQ(StatsOf(kB).active[kAggregate].current, 0);
  EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);  // A's books are gone
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, ARemovedOwnersBooksGoWithItsLastPendingFree) {
  for (bool remove_again : {false, true}) {
    SCOPED_TRACE(remove_again ? "RemoveClient again" : "EmptyCache of the removed client");
    Init(256 * kMiB);
    const BackendStream side = NewStream();
    Gate* gate = HoldBack(side);
    const AllocationResult r = Alloc(3 * kMiB, kA);
    allocator_->Recharge(kDev, r.address, kB);
    allocator_->RemoveClient(kA);  // A lingers: its segment holds B's block
    allocator_->RecordStream(kDev, r.address, kS1, side);
    allocator_->Free(kDev, r.address);
    {
      DelayedOpener opener(gate);
      // The pending free takes A's segment, and A's state, along with it.
      if (remove_again) {
        allocator_->RemoveClient(kA);
      } else {
        allocator_->EmptyCache(kDev, kA);
      }
      EXPECT_TRUE(opener.opened());
    }
    EXPECT_THAT(released_, ElementsAre(r.segment_id));
    EXPECT_EQ(StatsOf(kA).num_device_alloc, 0);  // forgotten: zeros
    EXPECT_EQ(Stats().reserved_bytes[kAggregate].current, 0);
    ExpectBooksConsistent();
  }
}

TEST_F(AllocatorStreamsTest, TheEventPoolReusesDefaultFlagEvents) {
  const BackendStream side = NewStream();
  for (int round = 0; round < 3; ++round) {
    std::vector<AllocationResult> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(Alloc(kMiB));
    for (const AllocationResult& r : blocks) {
      allocator_->RecordStream(kDev, r.address, kS1, side);
      allocator_->Free(kDev, r.address);
    }
    ASSERT_OK(host_->SynchronizeStream(side));
    Free(Alloc(kKiB, kA, StreamId(7)));  // process_events returns them to the pool
  }
  const std::vector<EventFlags> created = events_->created_flags();
  ASSERT_EQ(created.size(), 4u);
  for (const EventFlags& f : created) {
    EXPECT_FALSE(f.enable_timing);
    EXPECT_FALSE(f.blocking);
    EXPECT_FALSE(f.interprocess);
  }
  EXPECT_EQ(events_->records_.load(), 12);
  EXPECT_TRUE(events_->destroyed().empty());
  allocator_.reset();  // the pool's events go with the allocator
  EXPECT_EQ(events_->destroyed().size(), 4u);
}

TEST_F(AllocatorStreamsTest, ProcessEventsCostsNoBackendCallWithoutPendingFrees) {
  for (int i = 0; i < 10; ++i) Free(Alloc(kMiB));
  EXPECT_EQ(events_->queries_.load(), 0);
  EXPECT_EQ(events_->syncs_.load(), 0);
  allocator_->EmptyCache(kDev, std::nullopt);
  EXPECT_EQ(events_->syncs_.load(), 0);
}

TEST_F(AllocatorStreamsTest, EventErrorsAreLoggedAndCountAsCompleted) {
  const BackendStream side = NewStream();
  HoldBack(side);  // never opened here: only the errors free the blocks

  events_->fail_record_ = true;  // no event at all: freed at once
  const AllocationResult r1 = Alloc(kMiB);
  allocator_->RecordStream(kDev, r1.address, kS1, side);
  allocator_->Free(kDev, r1.address);
  EXPECT_EQ(StateAt(r1.address), BlockState::kInactive);
  events_->fail_record_ = false;

  const AllocationResult r2 = Alloc(kMiB);
  EXPECT_EQ(r2.address, r1.address);
  allocator_->RecordStream(kDev, r2.address, kS1, side);
  allocator_->Free(kDev, r2.address);
  EXPECT_EQ(StateAt(r2.address), BlockState::kActivePendingFree);
  events_->fail_query_ = true;
  EXPECT_EQ(Alloc(kMiB).address, r2.address);  // the failed query completed it
  EXPECT_EQ(events_->destroyed().size(), 1u);  // a failed event is not pooled
  events_->fail_query_ = false;

  const AllocationResult r3 = Alloc(kMiB);
  allocator_->RecordStream(kDev, r3.address, kS1, side);
  allocator_->Free(kDev, r3.address);
  events_->fail_sync_ = true;
  allocator_->EmptyCache(kDev, std::nullopt);  // would hang on the closed gate otherwise
  EXPECT_EQ(StateAt(r3.address), BlockState::kInactive);
  EXPECT_EQ(Stats().active[kAggregate].current, 1);  // the block from the failed query
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, RandomWorkloadWithRecordStreamKeepsStatsConsistent) {
  Init(uint64_t{4} << 30);  // an address span: OOM (which would wait on gates) cannot happen
  std::mt19937_64 rng(2024);
  const ClientId clients[] = {kA, kB};
  BackendStream streams[3];
  Gate* gates[3];
  for (int i = 0; i < 3; ++i) {
    streams[i] = NewStream();
    gates[i] = HoldBack(streams[i]);
  }
  auto open_all = [&] {
    for (int i = 0; i < 3; ++i) {
      gates[i]->Open();
      gates[i] = HoldBack(streams[i]);
    }
  };
  // Only EmptyCache below (after open_all) may wait on events: a wait on a
  // closed gate (say, from an unexpected OOM retry) fails fast instead.
  events_->fail_sync_ = true;
  auto empty_cache = [&](std::optional<ClientId> client) {
    open_all();
    events_->fail_sync_ = false;
    allocator_->EmptyCache(kDev, client);
    events_->fail_sync_ = true;
  };
  std::vector<AllocationResult> live;
  int pending_seen = 0;
  for (int op = 0; op < 2000; ++op) {
    const uint64_t dice = rng() % 100;
    if (dice < 40 || live.empty()) {
      const uint64_t size = rng() % 3 == 0 ? kMiB + rng() % (12 * kMiB) : 1 + rng() % kMiB;
      live.push_back(Alloc(size, clients[rng() % 2], StreamId(rng() % 2)));
      if (HasFailure()) return;
    } else if (dice < 60) {
      const AllocationResult& r = live[rng() % live.size()];
      const int s = static_cast<int>(rng() % 3);
      Touch(streams[s], r);
      allocator_->RecordStream(kDev, r.address, StreamId(10 + s), streams[s]);
    } else if (dice < 95) {
      const size_t i = rng() % live.size();
      std::vector<BackendEvent> wait_for;
      if (rng() % 10 == 0) {
        absl::StatusOr<BackendEvent> event = host_->CreateEvent(kDev, EventFlags{});
        ASSERT_OK(event);
        ASSERT_OK(host_->RecordEvent(*event, streams[rng() % 3]));
        wait_for.push_back(*event);
      }
      allocator_->Free(kDev, live[i].address, wait_for);
      live[i] = live.back();
      live.pop_back();
    } else if (dice < 98) {
      gates[rng() % 3]->Open();  // a new gate for that stream comes with open_all
    } else if (dice < 99) {
      allocator_->Recharge(kDev, live[rng() % live.size()].address, clients[rng() % 2]);
    } else {
      empty_cache(rng() % 2 ? std::optional<ClientId>(clients[rng() % 2]) : std::nullopt);
    }
    if (op % 50 == 0) {
      for (const SegmentSnapshot& s : Segments()) {
        for (const BlockSnapshot& b : s.blocks) {
          pending_seen += b.state == BlockState::kActivePendingFree ? 1 : 0;
        }
      }
      ExpectBooksConsistent();
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(pending_seen, 0) << "the workload should leave frees pending";
  for (const AllocationResult& r : live) allocator_->Free(kDev, r.address);
  // EmptyCache only queries caller events: let every stream finish first so
  // that the ones recorded there read complete.
  for (int i = 0; i < 3; ++i) {
    gates[i]->Open();
    ASSERT_OK(host_->SynchronizeStream(streams[i]));
  }
  events_->fail_sync_ = false;
  allocator_->EmptyCache(kDev, std::nullopt);
  ExpectBooksConsistent();
  const DeviceStats s = Stats();
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.active[kAggregate].current, 0);
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
}

// A stream destroyed while a live block still names it: one last event is
// recorded on it, and the block's free waits on that instead of recording on
// the gone stream (which would fail and free the block at once).
TEST_F(AllocatorStreamsTest, ARetiredStreamsLastEventGuardsTheBlocksThatUsedIt) {
  const BackendStream side = NewStream();
  Gate* gate = HoldBack(side);
  const AllocationResult a = Alloc(512 * kKiB);
  const AllocationResult b = Alloc(512 * kKiB);
  for (const AllocationResult* r : {&a, &b}) {
    Touch(side, *r);
    allocator_->RecordStream(kDev, r->address, kS1, side);
  }
  const int records_before = events_->records_.load();
  allocator_->RetireStream(kDev, side);
  ASSERT_OK(host_->DestroyStream(side));
  EXPECT_EQ(events_->records_.load(), records_before + 1);  // one event for both blocks

  Free(a);
  Free(b);
  EXPECT_EQ(events_->records_.load(), records_before + 1);  // nothing recorded on the gone stream
  EXPECT_EQ(StateAt(a.address), BlockState::kActivePendingFree);
  EXPECT_EQ(StateAt(b.address), BlockState::kActivePendingFree);
  const AllocationResult other = Alloc(512 * kKiB);
  EXPECT_NE(other.address, a.address);
  EXPECT_NE(other.address, b.address);
  Free(other);

  gate->Open();
  ASSERT_OK(host_->Synchronize(kDev));
  const AllocationResult reused = Alloc(512 * kKiB);  // process_events freed both first
  EXPECT_EQ(reused.address, a.address);
  EXPECT_EQ(StateAt(b.address), BlockState::kInactive);
  Free(reused);
  ExpectBooksConsistent();
}

TEST_F(AllocatorStreamsTest, RetiringAStreamNoLiveBlockNamesRecordsNothing) {
  const BackendStream side = NewStream();
  const AllocationResult a = Alloc(512 * kKiB);
  Touch(side, a);
  allocator_->RecordStream(kDev, a.address, kS1, side);
  Free(a);  // its use became an event now
  const int records_before = events_->records_.load();
  allocator_->RetireStream(kDev, side);
  ASSERT_OK(host_->DestroyStream(side));
  EXPECT_EQ(events_->records_.load(), records_before);
}

// One caller event serves every block of a batch: opened once, destroyed
// once when the last block stops waiting on it.
TEST_F(AllocatorStreamsTest, OneCallerEventServesAWholeFreeBatch) {
  std::vector<uint64_t> addresses;
  for (int i = 0; i < 100; ++i) addresses.push_back(Alloc(512).address);
  const ClientEvent* fence = RecordInClient();
  ASSERT_NE(fence, nullptr);
  allocator_->FreeBatch(kDev, addresses, {fence->opened});
  for (uint64_t address : addresses) EXPECT_EQ(StateAt(address), BlockState::kActivePendingFree);
  EXPECT_THAT(events_->destroyed(), Not(Contains(fence->opened)));
  fence->Complete();
  const int queries_before = events_->queries_.load();
  Free(Alloc(512));  // process_events: one query for the shared event
  EXPECT_EQ(events_->queries_.load(), queries_before + 1);
  for (uint64_t address : addresses) EXPECT_NE(StateAt(address), BlockState::kActivePendingFree);
  EXPECT_THAT(events_->destroyed(), Contains(fence->opened));
  ExpectBooksConsistent();
}

// A batch whose blocks need no wait still owns its caller events.
TEST_F(AllocatorStreamsTest, CallerEventsOfAnEmptyBatchAreDestroyed) {
  const ClientEvent* fence = RecordInClient();
  ASSERT_NE(fence, nullptr);
  allocator_->FreeBatch(kDev, {}, {fence->opened});
  EXPECT_THAT(events_->destroyed(), Contains(fence->opened));
}

}  // namespace
}  // namespace gpumux::testing
