// Client against the real daemon in this process (host backend): the session
// handshake and credentials, batched frees (as the wire and the daemon's books
// see them), segment mapping and release notices, sharing, limits, statistics
// and failure paths, including daemons that are gone or never answer.

#include "gpumux/client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client_testing.h"
#include "gmock/gmock.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/memory_snapshot.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"
#include "tests/client/rpc_recorder.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"
#include "tests/support/in_process_daemon.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::SizeIs;
using ::testing::StartsWith;

// The daemon's small segments (PyTorch's kSmallBuffer) hold blocks up to 1 MiB.
constexpr uint64_t kSmallSegment = uint64_t{2} << 20;

// Frees leave only with requests, so tests see exactly where they ride.
ClientOptions ManualFrees() {
  ClientOptions options;
  options.free_batch_delay = absl::InfiniteDuration();
  return options;
}

// For tests of daemon-side allocation itself: its Allocate and Free calls on
// the wire, its ids, segments and notices.
ClientOptions DaemonAllocation(ClientOptions options = ClientOptions()) {
  options.allocation = AllocationMode::kDaemon;
  return options;
}

class ClientTest : public DaemonClientTest {};

class ClientWithManualFreesTest : public DaemonClientTest {
 protected:
  ClientWithManualFreesTest() : DaemonClientTest({.client = ManualFrees()}) {}
};

class DaemonAllocationTest : public DaemonClientTest {
 protected:
  DaemonAllocationTest() : DaemonClientTest({.client = DaemonAllocation()}) {}
};

class DaemonAllocationWithManualFreesTest : public DaemonClientTest {
 protected:
  DaemonAllocationWithManualFreesTest()
      : DaemonClientTest({.client = DaemonAllocation(ManualFrees())}) {}
};

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

// The ids of each Free call `client` sent, in order.
std::vector<std::vector<uint64_t>> FreeCalls(const RpcRecorder& wire, const Client& client) {
  std::vector<std::vector<uint64_t>> calls;
  for (const v1::FreeRequest& request :
       wire.Requests<v1::FreeRequest>(client.session_id(), "Memory/Free")) {
    calls.emplace_back(request.allocation_ids().begin(), request.allocation_ids().end());
  }
  return calls;
}

// The free_allocation_ids each Allocate call of `client` carried, in order.
std::vector<std::vector<uint64_t>> CarriedFrees(const RpcRecorder& wire, const Client& client) {
  std::vector<std::vector<uint64_t>> calls;
  for (const v1::AllocateRequest& request :
       wire.Requests<v1::AllocateRequest>(client.session_id(), "Memory/Allocate")) {
    calls.emplace_back(request.free_allocation_ids().begin(), request.free_allocation_ids().end());
  }
  return calls;
}

// --- Connecting ----------------------------------------------------------------

TEST_F(ClientTest, ConnectOpensASessionAsRequestedAndUsesItsCredentials) {
  ClientOptions options;
  options.client_name = "trainer";
  options.tenant = "team-a";
  options.labels = {{"pod", "p-1"}, {"namespace", "ml"}};
  auto trainer = ConnectAnother(options);
  ASSERT_NE(trainer, nullptr);

  std::optional<v1::SessionInfo> session = daemon().Session(trainer->session_id());
  ASSERT_TRUE(session.has_value());
  EXPECT_EQ(session->client_name(), "trainer");
  EXPECT_EQ(session->pid(), getpid());
  EXPECT_EQ(session->tenant(), "team-a");
  EXPECT_EQ(session->labels().at("pod"), "p-1");
  EXPECT_EQ(session->labels().at("namespace"), "ml");
  EXPECT_EQ(trainer->tenant(), "team-a");
  EXPECT_EQ(trainer->backend(), "host");
  EXPECT_EQ(trainer->daemon_version(), GPUMUX_PROJECT_VERSION);  // CMake's PROJECT_VERSION
  EXPECT_EQ(trainer->address(), daemon().address());

  // Session-bound calls are UNAUTHENTICATED without the secret the daemon handed out.
  EXPECT_OK(trainer->Ping());
  EXPECT_OK(memory::MemoryAllocated(*trainer));
}

TEST_F(ClientTest, ClientNameDefaultsToTheProcessNameAndTenantToTheSession) {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  ASSERT_FALSE(name.empty());
  std::optional<v1::SessionInfo> session = daemon().Session(client().session_id());
  ASSERT_TRUE(session.has_value());
  EXPECT_EQ(session->client_name(), name);
  EXPECT_EQ(client().tenant(), absl::StrCat("session-", client().session_id().value()));
}

// Sets an environment variable for one scope, as a pod spec's env would.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST_F(ClientTest, NameTenantAndLabelsComeFromTheEnvironmentWhereOptionsLeaveThem) {
  ScopedEnv name("GPUMUX_CLIENT_NAME", "trainer-env");
  ScopedEnv tenant("GPUMUX_TENANT", "ml");
  // What a pod's downward API gives, with a blank and an empty pair.
  ScopedEnv labels("GPUMUX_LABELS", "pod=web-0, namespace=ml,,container=app,note=a=b");
  auto from_env = ConnectAnother();
  ASSERT_NE(from_env, nullptr);
  std::optional<v1::SessionInfo> session = daemon().Session(from_env->session_id());
  ASSERT_TRUE(session.has_value());
  EXPECT_EQ(session->client_name(), "trainer-env");
  EXPECT_EQ(session->tenant(), "ml");
  EXPECT_THAT(session->labels(),
              ::testing::UnorderedElementsAre(
                  ::testing::Pair("pod", "web-0"), ::testing::Pair("namespace", "ml"),
                  ::testing::Pair("container", "app"), ::testing::Pair("note", "a=b")));

  // What the options give wins, key by key.
  ClientOptions options;
  options.client_name = "trainer";
  options.tenant = "team-a";
  options.labels = {{"pod", "p-1"}};
  auto given = ConnectAnother(options);
  ASSERT_NE(given, nullptr);
  session = daemon().Session(given->session_id());
  ASSERT_TRUE(session.has_value());
  EXPECT_EQ(session->client_name(), "trainer");
  EXPECT_EQ(session->tenant(), "team-a");
  EXPECT_EQ(session->labels().at("pod"), "p-1");
  EXPECT_EQ(session->labels().at("namespace"), "ml");
}

TEST_F(ClientTest, MalformedLabelsInTheEnvironmentFailConnect) {
  for (const char* bad : {"pod", "pod=a,=b", "pod=a, namespace"}) {
    ScopedEnv labels("GPUMUX_LABELS", bad);
    EXPECT_THAT(Client::Connect(daemon().address()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(StartsWith(absl::StrCat("GPUMUX_LABELS=", bad, ": '")),
                                          HasSubstr("' is not KEY=VALUE"))))
        << bad;
  }
}

TEST(ClientConnectTest, ConnectToMissingDaemonIsUnavailable) {
  EXPECT_THAT(Client::Connect("/nonexistent/gpumux-test.sock"),
              StatusIs(absl::StatusCode::kUnavailable,
                       StartsWith("cannot reach gpumuxd at /nonexistent/gpumux-test.sock: ")));
}

TEST(ClientConnectTest, ConnectGivesUpOnADaemonThatNeverAnswersTheConnection) {
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
  std::filesystem::remove_all(dir_template);
}

TEST(ClientConnectTest, ConnectReportsTheDaemonsRefusal) {
  InProcessDaemon daemon;
  ClientOptions options;
  options.client_name = std::string(300, 'n');
  EXPECT_THAT(Client::Connect(daemon.address(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "client name is 300 bytes; at most 256 are allowed"));
  EXPECT_THAT(daemon.Sessions(), IsEmpty());
}

// --- Allocating and freeing ----------------------------------------------------

// Pinned: it reads the daemon's Allocate answers (segment handles) off the wire.
TEST_F(DaemonAllocationTest, AllocationsShareOneMappingOfTheirSegment) {
  RpcRecorder wire;
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(client(), 1000);
  absl::StatusOr<DeviceBuffer> b = memory::Allocate(client(), 100, DeviceIndex(0));
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->size(), 1000u);
  EXPECT_EQ(a->allocated_size(), 1024u);  // PyTorch rounds to 512
  EXPECT_EQ(a->device(), DeviceIndex(0));
  EXPECT_EQ(a->segment_id(), b->segment_id());
  EXPECT_NE(a->offset(), b->offset());
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(client()), 1u);
  ASSERT_NE(a->data(), nullptr);
  ASSERT_NE(b->data(), nullptr);
  EXPECT_EQ(static_cast<char*>(b->data()) - static_cast<char*>(a->data()),
            static_cast<ptrdiff_t>(b->offset() - a->offset()));

  // The client's pointers are the daemon's segment: a mapping of the memory
  // file its handle names, fetched from the memory socket, sees the same bytes
  // at the same offsets.
  std::vector<RecordedCall> calls = wire.Calls(client().session_id(), "Memory/Allocate");
  ASSERT_THAT(calls, SizeIs(2));
  const v1::Allocation& allocation = calls[1].allocation;
  ASSERT_EQ(allocation.segment_handle().kind(), v1::HANDLE_KIND_HOST_MEMFD);
  RawSession peer(grpc::CreateChannel(daemon().address(), grpc::InsecureChannelCredentials()),
                  "peer");
  absl::StatusOr<SealedMemory> file = FetchMemory(
      peer, daemon().socket_path(), allocation.segment_handle().data(), allocation.segment_size());
  ASSERT_OK(file);
  void* own =
      mmap(nullptr, allocation.segment_size(), PROT_READ | PROT_WRITE, MAP_SHARED, file->fd(), 0);
  ASSERT_NE(own, MAP_FAILED);
  char* base = static_cast<char*>(own);
  std::memcpy(b->data(), "hello", 5);
  EXPECT_EQ(std::string(base + b->offset(), 5), "hello");
  std::memcpy(base + a->offset(), "world", 5);
  EXPECT_EQ(std::string(static_cast<char*>(a->data()), 5), "world");
  munmap(own, allocation.segment_size());
}

// Pinned: frees riding on Allocate calls are daemon-side allocation's wire traffic.
TEST_F(DaemonAllocationWithManualFreesTest, DroppedBufferRidesOnTheNextAllocate) {
  RpcRecorder wire;
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(client(), 512);
  ASSERT_OK(a);
  const uint64_t a_id = a->id().value();
  { DeviceBuffer dropped = std::move(a).value(); }
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(1u));  // only queued
  ASSERT_OK(memory::Allocate(client(), 512));  // dropped at once, queued again
  EXPECT_THAT(CarriedFrees(wire, client()), ElementsAre(IsEmpty(), ElementsAre(a_id)));
  EXPECT_THAT(FreeCalls(wire, client()), IsEmpty());
  // `a` is gone; the new one is queued.
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(1u));
}

TEST_F(ClientWithManualFreesTest, StatsReflectDroppedBuffersAtOnce) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 1000);
  ASSERT_OK(buffer);
  std::memset(buffer->data(), 0xab, buffer->size());
  EXPECT_THAT(memory::MemoryAllocated(client()), IsOkAndHolds(1024));
  memory::Release(client(), std::move(buffer).value());
  // torch: after `del x`, memory_allocated() drops.
  EXPECT_THAT(memory::MemoryAllocated(client()), IsOkAndHolds(0));
  EXPECT_THAT(memory::MaxMemoryAllocated(client()), IsOkAndHolds(1024));
  EXPECT_THAT(memory::MemoryReserved(client()), IsOkAndHolds(int64_t{kSmallSegment}));  // cached
  absl::StatusOr<std::map<std::string, int64_t>> stats = memory::MemoryStats(client());
  ASSERT_OK(stats);
  EXPECT_EQ(stats->at("allocation.all.allocated"), 1);
  EXPECT_EQ(stats->at("allocation.all.freed"), 1);
}

// Pinned: which call carries a daemon allocation's free is wire traffic.
TEST_F(DaemonAllocationWithManualFreesTest, AStatsCallSendsTheQueuedFreesFirst) {
  RpcRecorder wire;
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 1000);
  ASSERT_OK(buffer);
  const uint64_t id = buffer->id().value();
  memory::Release(client(), std::move(buffer).value());
  EXPECT_THAT(FreeCalls(wire, client()), IsEmpty());
  EXPECT_THAT(memory::MemoryAllocated(client()), IsOkAndHolds(0));
  EXPECT_THAT(FreeCalls(wire, client()), ElementsAre(ElementsAre(id)));
}

// Pinned: the flusher sends daemon allocations' frees (local blocks make no call).
TEST_F(DaemonAllocationTest, BackgroundFlusherSendsFreesWithoutFurtherCalls) {
  // client() has the default batching: frees wait at most 1 ms for company.
  RpcRecorder wire;
  uint64_t id;
  {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4096);
    ASSERT_OK(buffer);
    id = buffer->id().value();
  }
  EXPECT_TRUE(Eventually([&] {
    return daemon().LiveAllocations(client().session_id()) == 0u &&
           FreeCalls(wire, client()) == std::vector<std::vector<uint64_t>>{{id}};
  }));
}

// Pinned: it counts Free calls on the wire.
TEST_F(DaemonAllocationWithManualFreesTest, BurstOfDropsBecomesOneFreeCall) {
  RpcRecorder wire;
  std::vector<DeviceBuffer> buffers;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512);
    ASSERT_OK(buffer);
    buffers.push_back(std::move(buffer).value());
  }
  buffers.clear();
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(5u));
  EXPECT_OK(memory::FlushFrees(client()));
  std::vector<std::vector<uint64_t>> frees = FreeCalls(wire, client());
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].size(), 5u);
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(0u));
}

TEST_F(ClientWithManualFreesTest, FreeIsSynchronousAndReportsTheDaemonsAnswer) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512);
  ASSERT_OK(buffer);
  EXPECT_OK(memory::Free(client(), std::move(buffer).value()));
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(0u));
  EXPECT_THAT(memory::Free(client(), DeviceBuffer()), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ClientWithManualFreesTest, FreeRejectsAnotherClientsBufferAndReleasesItToItsOwn) {
  Client* a = &client();
  auto b = ConnectAnother(ManualFrees());
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*a, 512);
  ASSERT_OK(buffer);
  EXPECT_THAT(memory::Free(*b, std::move(buffer).value()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another Client")));
  EXPECT_OK(memory::FlushFrees(*a));
  EXPECT_THAT(daemon().LiveAllocations(a->session_id()), Optional(0u));
}

TEST_F(ClientWithManualFreesTest, MovingABufferTransfersOwnership) {
  absl::StatusOr<DeviceBuffer> first = memory::Allocate(client(), 512);
  absl::StatusOr<DeviceBuffer> second = memory::Allocate(client(), 512);
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
  EXPECT_THAT(memory::MemoryAllocated(client()), IsOkAndHolds(512));
  std::memset(owner.data(), 1, 512);
}

TEST_F(ClientTest, AllocateErrorsCarryTheDaemonsCodeAndMessage) {
  // The daemon has 2 devices of 64 MiB.
  EXPECT_THAT(memory::Allocate(client(), 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(memory::Allocate(client(), 512, DeviceIndex(9)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "device 9 is out of range: this daemon has 2 devices (0..1)"));
  absl::StatusOr<DeviceBuffer> big = memory::Allocate(client(), uint64_t{48} << 20);
  ASSERT_OK(big);
  EXPECT_THAT(memory::Allocate(client(), uint64_t{32} << 20),
              StatusIs(absl::StatusCode::kResourceExhausted, StartsWith("CUDA out of memory.")));
}

// Pinned: frees carried on a failed Allocate call are daemon-side allocation's wire traffic.
TEST_F(DaemonAllocationWithManualFreesTest, FreesCarriedOnAFailedAllocateAreNotLost) {
  // The daemon has 2 devices of 64 MiB.
  const SessionId session = client().session_id();
  RpcRecorder wire;

  // A bad device is refused before the carried frees are applied: the client
  // sends them again on its own.
  uint64_t first;
  {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512);
    ASSERT_OK(buffer);
    first = buffer->id().value();
  }
  EXPECT_THAT(memory::Allocate(client(), 512, DeviceIndex(9)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(daemon().LiveAllocations(session), Optional(0u));
  std::vector<RecordedCall> frees = wire.Calls(session, "Memory/Free");
  ASSERT_THAT(frees, SizeIs(1));
  EXPECT_EQ(frees[0].code, grpc::StatusCode::OK);

  // Out of memory comes after the daemon applied them: the resend's NOT_FOUND
  // says so and is swallowed.
  absl::StatusOr<DeviceBuffer> big = memory::Allocate(client(), uint64_t{48} << 20);
  ASSERT_OK(big);
  uint64_t second;
  {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512);
    ASSERT_OK(buffer);
    second = buffer->id().value();
  }
  EXPECT_THAT(memory::Allocate(client(), uint64_t{32} << 20),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(daemon().LiveAllocations(session), Optional(1u));  // just `big`
  frees = wire.Calls(session, "Memory/Free");
  ASSERT_THAT(frees, SizeIs(2));
  EXPECT_EQ(frees[1].code, grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(CarriedFrees(wire, client()), ElementsAre(IsEmpty(), ElementsAre(first), IsEmpty(),
                                                        IsEmpty(), ElementsAre(second)));
  EXPECT_OK(memory::FlushFrees(client()));  // nothing left queued
  EXPECT_THAT(wire.Calls(session, "Memory/Free"), SizeIs(2));
}

// --- Segments and the cache ----------------------------------------------------

TEST_F(ClientWithManualFreesTest, EmptyCacheReleasesAndUnmapsUnusedSegments) {
  {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512);
    ASSERT_OK(buffer);
  }
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(client()), 1u);
  absl::StatusOr<ReleasedCache> released = memory::EmptyCache(client());
  ASSERT_OK(released);
  // The queued free went first, so the segment was unused.
  EXPECT_EQ(released->released_segments, 1u);
  EXPECT_EQ(released->released_bytes, kSmallSegment);
  // The daemon's SegmentReleased notice unmaps it.
  EXPECT_TRUE(Eventually([&] { return gpumux::MappedSegmentCountForTest(client()) == 0; }));
  EXPECT_THAT(memory::MemoryReserved(client()), IsOkAndHolds(0));
}

// Pinned: notices and an operator's empty-cache release daemon-side segments; a local
// client's cached leases only the client returns (no pressure protocol yet).
TEST_F(DaemonAllocationTest, SegmentReleasedNoticesUnmapOnlyTheReleasedSegment) {
  for (DeviceIndex device : {DeviceIndex(0), DeviceIndex(1)}) {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512, device);
    ASSERT_OK(buffer);
  }
  ASSERT_OK(memory::FlushFrees(client()));
  ASSERT_EQ(gpumux::MappedSegmentCountForTest(client()), 2u);

  EmptyCacheOptions device_one;
  device_one.device = DeviceIndex(1);
  ASSERT_THAT(memory::EmptyCache(client(), device_one),
              IsOkAndHolds(::testing::Field(&ReleasedCache::released_segments, 1u)));
  EXPECT_TRUE(Eventually([&] { return gpumux::MappedSegmentCountForTest(client()) == 1; }));
  // Device 0's segment is still mapped and usable.
  absl::StatusOr<DeviceBuffer> again = memory::Allocate(client(), 512, DeviceIndex(0));
  ASSERT_OK(again);
  static_cast<char*>(again->data())[0] = 1;
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(client()), 1u);
  memory::Release(client(), std::move(again).value());

  // An operator's empty-cache from another session releases this one's too.
  auto operator_client = ConnectAnother();
  ASSERT_NE(operator_client, nullptr);
  ASSERT_OK(memory::FlushFrees(client()));
  EmptyCacheOptions everyone;
  everyone.all_sessions = true;
  ASSERT_THAT(memory::EmptyCache(*operator_client, everyone),
              IsOkAndHolds(::testing::Field(&ReleasedCache::released_segments, 1u)));
  EXPECT_TRUE(Eventually([&] { return gpumux::MappedSegmentCountForTest(client()) == 0; }));
}

// --- Sharing -------------------------------------------------------------------

TEST_F(ClientTest, ImportedBufferIsTheSameMemory) {
  Client* producer = &client();
  auto consumer = ConnectAnother();
  ASSERT_NE(consumer, nullptr);
  AllocateOptions shareable;
  shareable.shareable = true;
  absl::StatusOr<DeviceBuffer> original =
      memory::Allocate(*producer, 4096, DeviceIndex(0), shareable);
  ASSERT_OK(original);
  std::memcpy(original->data(), "weights", 7);

  absl::StatusOr<std::string> token = memory::Share(*producer, *original);
  ASSERT_OK(token);
  absl::StatusOr<DeviceBuffer> imported = memory::Import(*consumer, *token);
  ASSERT_OK(imported);
  EXPECT_EQ(imported->size(), 4096u);
  EXPECT_EQ(std::string(static_cast<char*>(imported->data()), 7), "weights");
  std::memcpy(imported->data(), "WEIGHTS", 7);
  EXPECT_EQ(std::string(static_cast<char*>(original->data()), 7), "WEIGHTS");
  // Tokens are single-use.
  EXPECT_THAT(memory::Import(*consumer, *token), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(memory::Import(*consumer, "no-such-token"),
              StatusIs(absl::StatusCode::kInvalidArgument));

  absl::StatusOr<DeviceBuffer> plain = memory::Allocate(*producer, 512);
  ASSERT_OK(plain);
  EXPECT_THAT(memory::Share(*producer, *plain), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// --- The session's life --------------------------------------------------------

// Pinned: it reads the queued Free call off the wire.
TEST_F(DaemonAllocationWithManualFreesTest,
       DestroyingTheClientFreesQueuedBuffersAndEndsTheSession) {
  const SessionId session = client().session_id();
  RpcRecorder wire;
  absl::StatusOr<DeviceBuffer> kept = memory::Allocate(client(), 512);
  ASSERT_OK(kept);
  const uint64_t kept_id = kept->id().value();
  memory::Release(client(), std::move(kept).value());
  EXPECT_THAT(daemon().LiveAllocations(session), Optional(1u));
  DisconnectClient();
  // The queued free was sent, and applied, before the session ended.
  std::vector<RecordedCall> frees = wire.Calls(session, "Memory/Free");
  ASSERT_THAT(frees, SizeIs(1));
  EXPECT_EQ(frees[0].code, grpc::StatusCode::OK);
  v1::FreeRequest request;
  ASSERT_TRUE(request.ParseFromString(frees[0].request));
  EXPECT_THAT(request.allocation_ids(), ElementsAre(kept_id));
  EXPECT_TRUE(Eventually([&] { return daemon().Sessions().empty(); }));
}

TEST_F(ClientTest, CallsFailUnavailableOnceTheDaemonIsGone) {
  daemon().Shutdown();
  EXPECT_THAT(memory::MemoryAllocated(client()),
              StatusIs(absl::StatusCode::kUnavailable,
                       StartsWith("cannot reach gpumuxd at " + daemon().address() + ": ")));
  EXPECT_THAT(memory::Allocate(client(), 512),
              StatusIs(absl::StatusCode::kUnavailable, StartsWith("cannot reach gpumuxd at ")));
  EXPECT_THAT(client().DeviceCount(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(client().Ping(), StatusIs(absl::StatusCode::kUnavailable));
  DisconnectClient();  // must not hang
}

// Collects warnings and worse from the default logger while it lives.
class WarningCapture {
 public:
  WarningCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64)) {
    sink_->set_level(spdlog::level::warn);
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~WarningCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::vector<std::string> lines() const { return sink_->last_formatted(); }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

TEST_F(ClientTest, ASessionOfARestartedDaemonSaysSoAndEndsQuietly) {
  absl::StatusOr<DeviceBuffer> kept = memory::Allocate(client(), 512);
  ASSERT_OK(kept);
  daemon().Restart();
  const std::string restarted = "ended (the daemon restarted): reconnect";
  EXPECT_THAT(memory::Allocate(client(), 512),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(restarted)));
  EXPECT_THAT(memory::MemoryAllocated(client()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(restarted)));
  EXPECT_THAT(client().Ping(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr(restarted)));
  WarningCapture warnings;
  *kept = DeviceBuffer();                  // its free is queued, and cannot go anywhere
  absl::SleepFor(absl::Milliseconds(20));  // the background send tried it
  DisconnectClient();
  EXPECT_THAT(warnings.lines(), IsEmpty());
}

// --- Limits, devices and statistics --------------------------------------------

TEST_F(ClientTest, MemoryFractionIsCheckedLocallyAsPyTorchDoesAndCapsTheSession) {
  // The daemon has 2 devices of 64 MiB.
  const SessionId session = client().session_id();
  RpcRecorder wire;
  EXPECT_THAT(memory::SetPerProcessMemoryFraction(client(), 1.5),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: 1.5. Allowed range: 0~1"));
  EXPECT_THAT(memory::SetPerProcessMemoryFraction(client(), -0.25, DeviceIndex(1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Invalid fraction value: -0.25. Allowed range: 0~1"));
  EXPECT_THAT(wire.Calls(session, "Memory/SetMemoryLimit"), IsEmpty());

  // The limits the daemon then keeps for the session, per device.
  auto limit = [&](int device) -> uint64_t {
    std::optional<v1::SessionInfo> info = daemon().Session(session);
    return info.has_value() && device < info->devices_size()
               ? info->devices(device).memory_limit_bytes()
               : ~uint64_t{0};
  };
  EXPECT_OK(memory::SetPerProcessMemoryFraction(client(), 0.25, DeviceIndex(1)));
  EXPECT_EQ(limit(1), uint64_t{16} << 20);
  EXPECT_THAT(memory::Allocate(client(), uint64_t{32} << 20, DeviceIndex(1)),
              StatusIs(absl::StatusCode::kResourceExhausted, StartsWith("CUDA out of memory.")));
  EXPECT_OK(memory::SetMemoryLimit(client(), 1 << 20));
  EXPECT_EQ(limit(0), uint64_t{1} << 20);
  EXPECT_OK(memory::SetMemoryLimit(client(), 0, DeviceIndex(1)));
  EXPECT_EQ(limit(1), 0u);
  EXPECT_OK(memory::Allocate(client(), uint64_t{32} << 20, DeviceIndex(1)).status());
  EXPECT_THAT(wire.Calls(session, "Memory/SetMemoryLimit"), SizeIs(3));
}

TEST_F(ClientTest, DeviceQueries) {
  // The daemon has 2 devices of 64 MiB.
  EXPECT_THAT(client().DeviceCount(), IsOkAndHolds(2));
  EXPECT_THAT(client().GetDeviceName(DeviceIndex(1)),
              IsOkAndHolds(std::string("gpumux host device 1")));
  absl::StatusOr<DeviceProperties> properties = client().GetDeviceProperties(DeviceIndex(0));
  ASSERT_OK(properties);
  EXPECT_EQ(properties->index, 0);
  EXPECT_EQ(properties->total_memory, uint64_t{64} << 20);
  EXPECT_EQ(properties->free_memory, uint64_t{64} << 20);
  EXPECT_EQ(properties->backend, "host");
  EXPECT_GT(properties->multi_processor_count, 0);
  EXPECT_THAT(client().GetDeviceProperties(DeviceIndex(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "device 5 is out of range: this daemon has 2 devices (0..1)"));
  EXPECT_OK(client().Synchronize(DeviceIndex(0)));
}

TEST_F(ClientTest, StatsSummaryAndSnapshotOfTheSession) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 1000, DeviceIndex(1));
  ASSERT_OK(buffer);

  absl::StatusOr<std::map<std::string, int64_t>> stats =
      memory::MemoryStats(client(), DeviceIndex(1));
  ASSERT_OK(stats);
  EXPECT_EQ(stats->size(), 122u);  // PyTorch's keys
  EXPECT_EQ(stats->at("allocated_bytes.all.current"), 1024);
  EXPECT_THAT(memory::MemoryAllocated(client(), DeviceIndex(0)), IsOkAndHolds(0));
  EXPECT_THAT(memory::MaxMemoryAllocated(client(), DeviceIndex(1)), IsOkAndHolds(1024));
  EXPECT_THAT(memory::MaxMemoryReserved(client(), DeviceIndex(1)),
              IsOkAndHolds(int64_t{kSmallSegment}));
  EXPECT_THAT(memory::MemorySummary(client(), DeviceIndex(1), /*abbreviated=*/true),
              IsOkAndHolds(HasSubstr("PyTorch CUDA memory summary, device ID 1 ")));

  absl::StatusOr<std::vector<SegmentInfo>> snapshot = memory::MemorySnapshot(client());
  ASSERT_OK(snapshot);
  ASSERT_EQ(snapshot->size(), 1u);
  const SegmentInfo& segment = snapshot->front();
  EXPECT_EQ(segment.device, 1);
  EXPECT_EQ(segment.segment_id, buffer->segment_id());
  EXPECT_EQ(segment.session_id, client().session_id());
  EXPECT_EQ(segment.segment_type, "small");
  EXPECT_EQ(segment.total_size, kSmallSegment);
  ASSERT_FALSE(segment.blocks.empty());
  EXPECT_EQ(segment.blocks[0].address, buffer->address());
  EXPECT_EQ(segment.blocks[0].requested_size, 1000u);
  EXPECT_EQ(segment.blocks[0].state, "active_allocated");
  EXPECT_THAT(memory::MemorySnapshot(client(), DeviceIndex(0)), IsOkAndHolds(IsEmpty()));

  memory::Release(client(), std::move(buffer).value());
  EXPECT_OK(memory::ResetPeakMemoryStats(client(), DeviceIndex(1)));
  EXPECT_THAT(memory::MaxMemoryAllocated(client(), DeviceIndex(1)), IsOkAndHolds(0));
  EXPECT_OK(memory::ResetAccumulatedMemoryStats(client(), DeviceIndex(1)));
  stats = memory::MemoryStats(client(), DeviceIndex(1));
  ASSERT_OK(stats);
  EXPECT_EQ(stats->at("allocation.all.allocated"), 0);
}

TEST_F(ClientTest, ManyThreadsAllocateAndDropConcurrently) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 512);
        ASSERT_OK(buffer);
        static_cast<char*>(buffer->data())[0] = 1;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(memory::MemoryAllocated(client()), IsOkAndHolds(0));
  EXPECT_THAT(daemon().LiveAllocations(client().session_id()), Optional(0u));
  absl::StatusOr<std::map<std::string, int64_t>> stats = memory::MemoryStats(client());
  ASSERT_OK(stats);
  EXPECT_EQ(stats->at("allocation.all.allocated"), 200);
  EXPECT_EQ(stats->at("allocation.all.freed"), 200);
}

}  // namespace
}  // namespace gpumux::testing
