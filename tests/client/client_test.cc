// Client against FakeDaemon: the session handshake and credentials, batched
// frees, segment mapping and notices, sharing, limits and failure paths.

#include "client/client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_daemon.h"
#include "tests/client/status_or_matchers.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::client_testing::IsOkAndHolds;
using ::gpumux::testing::FakeDaemon;
using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// Frees leave only with requests, so tests see exactly where they ride.
ClientOptions ManualFrees() {
  ClientOptions options;
  options.free_batch_delay = absl::InfiniteDuration();
  return options;
}

std::unique_ptr<Client> ConnectOrDie(const FakeDaemon& daemon,
                                     const ClientOptions& options = ClientOptions()) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(daemon.address(), options);
  EXPECT_OK(client);
  return client.ok() ? std::move(client).value() : nullptr;
}

// Waits up to a second for `condition`.
template <typename Condition>
bool Eventually(Condition condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return condition();
}

TEST(ClientTest, ConnectSendsOpenSessionRequestAndUsesItsCredentials) {
  FakeDaemon daemon;
  ClientOptions options;
  options.client_name = "trainer";
  options.tenant = "team-a";
  options.labels = {{"pod", "p-1"}, {"namespace", "ml"}};
  auto client = ConnectOrDie(daemon, options);
  ASSERT_NE(client, nullptr);

  ASSERT_EQ(daemon.open_requests().size(), 1u);
  const v1::OpenSessionRequest open = daemon.open_requests()[0];
  EXPECT_EQ(open.client_name(), "trainer");
  EXPECT_EQ(open.pid(), getpid());
  EXPECT_EQ(open.tenant(), "team-a");
  EXPECT_EQ(open.labels().at("pod"), "p-1");
  EXPECT_EQ(open.labels().at("namespace"), "ml");
  EXPECT_EQ(client->session_id(), SessionId(7));
  EXPECT_EQ(client->tenant(), "team-a");
  EXPECT_EQ(client->backend(), "host");
  EXPECT_EQ(client->address(), daemon.address());

  EXPECT_OK(client->Ping());
  EXPECT_OK(client->MemoryAllocated());
  EXPECT_EQ(daemon.unauthenticated_calls(), 0);
}

TEST(ClientTest, ClientNameDefaultsToTheProcessName) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  ASSERT_FALSE(name.empty());
  EXPECT_EQ(daemon.open_requests().at(0).client_name(), name);
}

TEST(ClientTest, ConnectToMissingDaemonIsUnavailable) {
  EXPECT_THAT(Client::Connect("/nonexistent/gpumux-test.sock"),
              StatusIs(absl::StatusCode::kUnavailable,
                       StartsWith("cannot reach gpumuxd at /nonexistent/gpumux-test.sock: ")));
}

TEST(ClientTest, ConnectGivesUpWhenTheDaemonNeverOpensTheSession) {
  FakeDaemon::Options fake;
  fake.send_opened = false;
  FakeDaemon daemon(fake);
  ClientOptions options;
  options.open_timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  EXPECT_THAT(Client::Connect(daemon.address(), options),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("did not open a session")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(ClientTest, ConnectGivesUpOnADaemonThatNeverAnswersTheConnection) {
  // A listening socket nobody accepts on: the kernel completes the connect,
  // the HTTP/2 handshake never does (a stopped or wedged daemon).
  char dir_template[] = "/tmp/gpumux-client-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/mute.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 16), 0);

  ClientOptions options;
  options.open_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  EXPECT_THAT(Client::Connect(path, options),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       "gpumuxd at " + path + " did not accept a connection within 300ms"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  close(fd);
  unlink(path.c_str());
  rmdir(dir_template);
}

TEST(ClientTest, ConnectReportsTheDaemonsRefusal) {
  FakeDaemon::Options fake;
  fake.refuse_sessions = true;
  FakeDaemon daemon(fake);
  EXPECT_THAT(Client::Connect(daemon.address()),
              StatusIs(absl::StatusCode::kResourceExhausted, "too many sessions"));
}

TEST(ClientTest, AllocationsShareOneMappingOfTheirSegment) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> a = client->Allocate(1000);
  absl::StatusOr<DeviceBuffer> b = client->Allocate(100, DeviceIndex(0));
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->size(), 1000u);
  EXPECT_EQ(a->allocated_size(), 1024u);
  EXPECT_EQ(a->device(), DeviceIndex(0));
  EXPECT_EQ(a->segment_id(), b->segment_id());
  EXPECT_EQ(client->MappedSegmentCountForTest(), 1u);
  ASSERT_NE(a->data(), nullptr);
  EXPECT_EQ(static_cast<char*>(b->data()) - static_cast<char*>(a->data()),
            static_cast<ptrdiff_t>(b->offset() - a->offset()));

  // The client's pointer and the daemon's mapping are the same memory.
  std::memcpy(b->data(), "hello", 5);
  EXPECT_EQ(daemon.ReadAllocation(b->id().value(), 5), "hello");
  daemon.WriteAllocation(a->id().value(), "world");
  EXPECT_EQ(std::string(static_cast<char*>(a->data()), 5), "world");
}

TEST(ClientTest, DroppedBufferRidesOnTheNextAllocate) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> a = client->Allocate(512);
  ASSERT_OK(a);
  const uint64_t a_id = a->id().value();
  { DeviceBuffer dropped = std::move(a).value(); }
  EXPECT_EQ(daemon.live_allocations(), 1);
  ASSERT_OK(client->Allocate(512));  // dropped at once, queued again
  EXPECT_THAT(daemon.allocate_carried_frees(), ElementsAre(IsEmpty(), ElementsAre(a_id)));
  EXPECT_THAT(daemon.free_calls(), IsEmpty());
}

TEST(ClientTest, StatsReflectDroppedBuffersAtOnce) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(1000);
  ASSERT_OK(buffer);
  EXPECT_THAT(client->MemoryAllocated(), IsOkAndHolds(1024));
  client->Release(std::move(buffer).value());
  // torch: after `del x`, memory_allocated() drops.
  EXPECT_THAT(client->MemoryAllocated(), IsOkAndHolds(0));
  EXPECT_EQ(daemon.free_calls().size(), 1u);
  EXPECT_THAT(client->MemoryReserved(), IsOkAndHolds(int64_t{FakeDaemon::kSegmentSize}));
}

TEST(ClientTest, BackgroundFlusherSendsFreesWithoutFurtherCalls) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  {
    absl::StatusOr<DeviceBuffer> buffer = client->Allocate(4096);
    ASSERT_OK(buffer);
  }
  EXPECT_TRUE(Eventually([&] { return daemon.live_allocations() == 0; }));
}

TEST(ClientTest, BurstOfDropsBecomesOneFreeCall) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  std::vector<DeviceBuffer> buffers;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
    ASSERT_OK(buffer);
    buffers.push_back(std::move(buffer).value());
  }
  buffers.clear();
  EXPECT_OK(client->FlushFrees());
  ASSERT_EQ(daemon.free_calls().size(), 1u);
  EXPECT_EQ(daemon.free_calls()[0].size(), 5u);
  EXPECT_EQ(daemon.live_allocations(), 0);
}

TEST(ClientTest, FreeIsSynchronousAndReportsTheDaemonsAnswer) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
  ASSERT_OK(buffer);
  EXPECT_OK(client->Free(std::move(buffer).value()));
  EXPECT_EQ(daemon.live_allocations(), 0);
  EXPECT_THAT(client->Free(DeviceBuffer()), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ClientTest, FreeRejectsAnotherClientsBuffer) {
  FakeDaemon daemon;
  auto a = ConnectOrDie(daemon);
  auto b = ConnectOrDie(daemon);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = a->Allocate(512);
  ASSERT_OK(buffer);
  EXPECT_THAT(b->Free(std::move(buffer).value()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another Client")));
}

TEST(ClientTest, MovingABufferTransfersOwnership) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> first = client->Allocate(512);
  absl::StatusOr<DeviceBuffer> second = client->Allocate(512);
  ASSERT_OK(first);
  ASSERT_OK(second);
  const AllocationId first_id = first->id();
  const AllocationId second_id = second->id();

  DeviceBuffer owner(std::move(first).value());
  EXPECT_TRUE(owner.valid());
  EXPECT_EQ(owner.id(), first_id);
  EXPECT_FALSE(first->valid());
  EXPECT_EQ(first->data(), nullptr);

  // Assigning over a live buffer frees what it held.
  owner = std::move(second).value();
  EXPECT_EQ(owner.id(), second_id);
  ASSERT_OK(client->FlushFrees());
  EXPECT_THAT(daemon.free_calls(), ElementsAre(ElementsAre(first_id.value())));
  EXPECT_EQ(daemon.live_allocations(), 1);
}

TEST(ClientTest, AllocateErrorsCarryTheDaemonsCodeAndMessage) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->Allocate(0),
              StatusIs(absl::StatusCode::kInvalidArgument, "cannot allocate 0 bytes"));
  EXPECT_THAT(client->Allocate(FakeDaemon::kSegmentSize + 1),
              StatusIs(absl::StatusCode::kResourceExhausted, StartsWith("CUDA out of memory.")));
  EXPECT_THAT(client->Allocate(512, DeviceIndex(9)), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ClientTest, FreesCarriedOnAFailedAllocateAreNotLost) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  {
    absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
    ASSERT_OK(buffer);
  }
  // The fake rejects size 0 before applying the carried free; the client
  // sends it again on its own.
  EXPECT_THAT(client->Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(daemon.live_allocations(), 0);

  // When the daemon did apply them (out of memory comes after the frees), the
  // resend's NOT_FOUND is swallowed.
  {
    absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
    ASSERT_OK(buffer);
  }
  EXPECT_THAT(client->Allocate(FakeDaemon::kSegmentSize + 1),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(daemon.live_allocations(), 0);
  EXPECT_OK(client->FlushFrees());
}

TEST(ClientTest, SegmentReleasedNoticeUnmapsTheSegment) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  uint64_t segment;
  {
    absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
    ASSERT_OK(buffer);
    segment = buffer->segment_id().value();
  }
  ASSERT_EQ(client->MappedSegmentCountForTest(), 1u);
  daemon.SendSegmentReleased(/*device=*/1, segment);  // another device: not ours
  daemon.SendSegmentReleased(/*device=*/0, segment);
  EXPECT_TRUE(Eventually([&] { return client->MappedSegmentCountForTest() == 0; }));
}

TEST(ClientTest, EmptyCacheReleasesAndUnmapsUnusedSegments) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  {
    absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
    ASSERT_OK(buffer);
  }
  absl::StatusOr<ReleasedCache> released = client->EmptyCache();
  ASSERT_OK(released);
  // The queued free went first, so the segment was unused.
  EXPECT_EQ(released->released_segments, 1u);
  EXPECT_EQ(released->released_bytes, FakeDaemon::kSegmentSize);
  EXPECT_TRUE(Eventually([&] { return client->MappedSegmentCountForTest() == 0; }));
}

TEST(ClientTest, ImportedBufferSeesTheSharedBytes) {
  FakeDaemon daemon;
  auto producer = ConnectOrDie(daemon);
  auto consumer = ConnectOrDie(daemon);
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  AllocateOptions shareable;
  shareable.shareable = true;
  absl::StatusOr<DeviceBuffer> original = producer->Allocate(4096, DeviceIndex(0), shareable);
  ASSERT_OK(original);
  std::memcpy(original->data(), "weights", 7);

  absl::StatusOr<std::string> token = producer->Share(*original);
  ASSERT_OK(token);
  absl::StatusOr<DeviceBuffer> imported = consumer->Import(*token);
  ASSERT_OK(imported);
  EXPECT_NE(imported->id(), original->id());
  EXPECT_EQ(imported->size(), 4096u);
  EXPECT_EQ(std::string(static_cast<char*>(imported->data()), 7), "weights");
  EXPECT_THAT(consumer->Import(*token), StatusIs(absl::StatusCode::kNotFound));

  absl::StatusOr<DeviceBuffer> plain = producer->Allocate(512);
  ASSERT_OK(plain);
  EXPECT_THAT(producer->Share(*plain), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ClientTest, CudaHandlesAllocateWithoutAHostPointer) {
  FakeDaemon::Options fake;
  fake.cuda_handles = true;
  FakeDaemon daemon(fake);
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
  ASSERT_OK(buffer);
  EXPECT_TRUE(buffer->valid());
  EXPECT_EQ(buffer->data(), nullptr);
  EXPECT_EQ(client->MappedSegmentCountForTest(), 0u);
}

TEST(ClientTest, DestroyingTheClientFreesQueuedBuffersAndEndsTheSession) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon, ManualFrees());
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> kept = client->Allocate(512);
  ASSERT_OK(kept);
  const uint64_t kept_id = kept->id().value();
  client->Release(std::move(kept).value());
  EXPECT_EQ(daemon.sessions_open(), 1);
  client.reset();
  EXPECT_THAT(daemon.free_calls(), ElementsAre(ElementsAre(kept_id)));
  EXPECT_TRUE(Eventually([&] { return daemon.sessions_open() == 0; }));
  EXPECT_EQ(daemon.sessions_closed_cleanly(), 1);
}

TEST(ClientTest, CallsFailUnavailableOnceTheDaemonIsGone) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  daemon.Shutdown();
  EXPECT_THAT(client->MemoryAllocated(),
              StatusIs(absl::StatusCode::kUnavailable,
                       StartsWith("cannot reach gpumuxd at " + daemon.address() + ": ")));
  EXPECT_THAT(client->Allocate(512), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(client->DeviceCount(), StatusIs(absl::StatusCode::kUnavailable));
  client.reset();  // must not hang
}

TEST(ClientTest, MemoryFractionIsCheckedLocallyAsPyTorchDoes) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->SetPerProcessMemoryFraction(1.5),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: 1.5. Allowed range: 0~1"));
  EXPECT_THAT(client->SetPerProcessMemoryFraction(-0.25, DeviceIndex(1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: -0.25. Allowed range: 0~1"));
  EXPECT_THAT(daemon.memory_limit_requests(), IsEmpty());

  EXPECT_OK(client->SetPerProcessMemoryFraction(0.5, DeviceIndex(1)));
  EXPECT_OK(client->SetMemoryLimit(1 << 20));
  EXPECT_OK(client->SetMemoryLimit(0));
  EXPECT_THAT(daemon.memory_limit_requests(),
              ElementsAre("device=1 fraction=0.5", "device=0 bytes=1048576", "device=0 unlimited"));
}

TEST(ClientTest, DeviceQueries) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->DeviceCount(), IsOkAndHolds(2));
  EXPECT_THAT(client->GetDeviceName(DeviceIndex(1)), IsOkAndHolds(std::string("fake1")));
  absl::StatusOr<DeviceProperties> properties = client->GetDeviceProperties(DeviceIndex(0));
  ASSERT_OK(properties);
  EXPECT_EQ(properties->total_memory, FakeDaemon::kDeviceMemory);
  EXPECT_EQ(properties->backend, "host");
  EXPECT_EQ(properties->multi_processor_count, 4);
  EXPECT_THAT(client->GetDeviceProperties(DeviceIndex(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, "device 5 is out of range (2 devices)"));
  EXPECT_OK(client->Synchronize(DeviceIndex(0)));
}

TEST(ClientTest, StatsSummaryAndSnapshotOfTheSession) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = client->Allocate(1000, DeviceIndex(1));
  ASSERT_OK(buffer);

  absl::StatusOr<std::map<std::string, int64_t>> stats = client->MemoryStats(DeviceIndex(1));
  ASSERT_OK(stats);
  EXPECT_EQ(stats->size(), 122u);
  EXPECT_EQ(stats->at("allocated_bytes.all.current"), 1024);
  EXPECT_THAT(client->MaxMemoryAllocated(DeviceIndex(1)), IsOkAndHolds(1024));
  EXPECT_THAT(client->MaxMemoryReserved(DeviceIndex(1)),
              IsOkAndHolds(int64_t{FakeDaemon::kSegmentSize}));
  EXPECT_THAT(client->MemorySummary(DeviceIndex(1), /*abbreviated=*/true),
              IsOkAndHolds(std::string("summary of device 1 (abbreviated)\n")));

  absl::StatusOr<std::vector<SegmentInfo>> snapshot = client->MemorySnapshot();
  ASSERT_OK(snapshot);
  ASSERT_EQ(snapshot->size(), 1u);
  const SegmentInfo& segment = snapshot->front();
  EXPECT_EQ(segment.device, 1);
  EXPECT_EQ(segment.segment_id, buffer->segment_id());
  EXPECT_EQ(segment.session_id, client->session_id());
  EXPECT_EQ(segment.total_size, FakeDaemon::kSegmentSize);
  ASSERT_EQ(segment.blocks.size(), 1u);
  EXPECT_EQ(segment.blocks[0].address, buffer->address());
  EXPECT_EQ(segment.blocks[0].requested_size, 1000u);
  EXPECT_EQ(segment.blocks[0].state, "active_allocated");
  EXPECT_THAT(client->MemorySnapshot(DeviceIndex(0)), IsOkAndHolds(IsEmpty()));

  EXPECT_OK(client->ResetPeakMemoryStats(DeviceIndex(1)));
  EXPECT_OK(client->ResetAccumulatedMemoryStats(DeviceIndex(1)));
}

TEST(ClientTest, ManyThreadsAllocateAndDropConcurrently) {
  FakeDaemon daemon;
  auto client = ConnectOrDie(daemon);
  ASSERT_NE(client, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        absl::StatusOr<DeviceBuffer> buffer = client->Allocate(512);
        ASSERT_OK(buffer);
        static_cast<char*>(buffer->data())[0] = 1;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(client->MemoryAllocated(), IsOkAndHolds(0));
  EXPECT_EQ(daemon.live_allocations(), 0);
}

}  // namespace
}  // namespace gpumux
