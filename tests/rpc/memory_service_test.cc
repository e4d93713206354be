// Memory, Session and Observe services end to end over a real Unix socket.

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"

namespace gpumux::testing {
namespace {

class MemoryServiceTest : public DaemonTest {
 protected:
  int64_t Stat(RawSession& session, int device, const std::string& key) {
    v1::GetStatsRequest request;
    request.set_device(device);
    v1::MemoryStats stats;
    EXPECT_TRUE(session.memory().GetStats(session.Context().get(), request, &stats).ok());
    return stats.values().at(key);
  }

  int64_t DeviceStat(int device, const std::string& key, uint64_t session_id = 0) {
    auto observe = v1::Observe::NewStub(channel_);
    v1::ObserveStatsRequest request;
    request.set_device(device);
    request.set_session_id(session_id);
    v1::MemoryStats stats;
    grpc::ClientContext context;
    EXPECT_TRUE(observe->GetMemoryStats(&context, request, &stats).ok());
    return stats.values().at(key);
  }
};

TEST_F(MemoryServiceTest, SocketIsMode0660) {
  struct stat st {};
  ASSERT_EQ(stat(daemon_->socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

// The daemon's socket may be handed to a group whose non-root members use
// it: a child process that drops to `nobody` connects only through that group.
TEST(SocketGroupTest, NonRootMembersOfTheSocketGroupCanConnect) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  TempDir dir;
  gid_t gid = 0;
  Daemon::Options options = NogroupSocketOptions(dir, &gid);
  ASSERT_FALSE(HasFailure());
  auto daemon = Daemon::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  struct stat st {};
  ASSERT_EQ(stat(options.socket_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(st.st_mode & 0777, 0660u);

  // connect(2) as uid nobody, with and without the group: 0 or errno.
  auto connect_as_nobody = [&](bool in_group) {
    const pid_t child = fork();
    if (child == 0) {
      // Primary group 1 (daemon); the socket's group only as a supplementary one.
      const gid_t groups[] = {gid};
      if (setgroups(in_group ? 1 : 0, groups) != 0 || setgid(1) != 0 || setuid(65534) != 0)
        _exit(100);
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::strncpy(address.sun_path, options.socket_path.c_str(), sizeof(address.sun_path) - 1);
      _exit(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 ? 0 : errno);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(connect_as_nobody(true), 0);
  EXPECT_EQ(connect_as_nobody(false), EACCES);

  options.socket_group = "no-such-group-gpumux";
  options.socket_path = dir.path() + "/other.sock";
  auto refused = Daemon::Start(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("no such group"), std::string::npos)
      << refused.status();
}

TEST_F(MemoryServiceTest, TwoSessionMetadataValuesAreRefused) {
  RawSession session(channel_, "twice");
  RawSession other(channel_, "other");
  auto stub = v1::Session::NewStub(channel_);
  grpc::ClientContext context;
  context.AddMetadata("gpumux-session", std::to_string(session.id()) + ":" + session.secret());
  context.AddMetadata("gpumux-session", std::to_string(other.id()) + ":" + other.secret());
  v1::PingRequest request;
  v1::PingResponse response;
  grpc::Status status = stub->Ping(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(status.error_message().find("2 gpumux-session metadata values"), std::string::npos)
      << status.error_message();
}

TEST_F(MemoryServiceTest, AllocatesWithPyTorchRoundingAndFrees) {
  RawSession session(channel_, "alloc");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 1000, &a).ok());
  EXPECT_EQ(a.requested_size(), 1000u);
  EXPECT_EQ(a.size(), 1024u);
  EXPECT_EQ(a.segment_size(), 2u << 20);  // small pool segment
  EXPECT_EQ(a.segment_handle().kind(), v1::HANDLE_KIND_HOST_MEMFD);
  EXPECT_EQ(Stat(session, 0, "allocated_bytes.all.current"), 1024);
  EXPECT_EQ(Stat(session, 0, "requested_bytes.all.current"), 1000);
  EXPECT_EQ(Stat(session, 0, "segment.small_pool.current"), 1);
  ASSERT_TRUE(session.Free({a.allocation_id()}).ok());
  EXPECT_EQ(Stat(session, 0, "allocated_bytes.all.current"), 0);
  EXPECT_EQ(Stat(session, 0, "reserved_bytes.all.current"), 2 << 20);  // cached
}

TEST_F(MemoryServiceTest, FreesCarriedOnAllocateAreAppliedFirst) {
  RawSession session(channel_, "piggyback");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  v1::AllocateRequest request;
  request.set_device(0);
  request.set_size(4096);
  request.add_free_allocation_ids(a.allocation_id());
  v1::AllocateResponse response;
  ASSERT_TRUE(session.memory().Allocate(session.Context().get(), request, &response).ok());
  // The freed block is reused: same address, one allocation live.
  EXPECT_EQ(response.allocation().address(), a.address());
  EXPECT_EQ(Stat(session, 0, "allocation.all.current"), 1);
  EXPECT_EQ(session.Free({a.allocation_id()}).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(MemoryServiceTest, SessionsNeverShareSegments) {
  RawSession a(channel_, "a");
  RawSession b(channel_, "b");
  v1::Allocation x, y;
  ASSERT_TRUE(a.Allocate(0, 512, &x).ok());
  ASSERT_TRUE(b.Allocate(0, 512, &y).ok());
  EXPECT_NE(x.segment_id(), y.segment_id());
  EXPECT_NE(x.segment_handle().data(), y.segment_handle().data());
  EXPECT_EQ(DeviceStat(0, "segment.all.current"), 2);
  EXPECT_EQ(DeviceStat(0, "allocated_bytes.all.current", a.id()), 512);
}

TEST_F(MemoryServiceTest, ShareAndImportKeepMemoryAliveUntilLastReference) {
  RawSession owner(channel_, "owner");
  RawSession importer(channel_, "importer");
  v1::Allocation a;
  ASSERT_TRUE(owner.Allocate(1, 3000, &a, /*shareable=*/true).ok());
  EXPECT_EQ(a.offset(), 0u);
  v1::ShareRequest share;
  share.set_allocation_id(a.allocation_id());
  v1::ShareResponse token;
  ASSERT_TRUE(owner.memory().Share(owner.Context().get(), share, &token).ok());
  v1::ImportRequest import;
  import.set_token(token.token());
  v1::ImportResponse imported;
  ASSERT_TRUE(importer.memory().Import(importer.Context().get(), import, &imported).ok());
  EXPECT_EQ(imported.allocation().segment_handle().data(), a.segment_handle().data());
  EXPECT_NE(imported.allocation().allocation_id(), a.allocation_id());

  ASSERT_TRUE(owner.Free({a.allocation_id()}).ok());
  // Still held by the importer, now charged to it.
  EXPECT_EQ(DeviceStat(1, "allocation.all.current"), 1);
  EXPECT_EQ(DeviceStat(1, "allocation.all.current", importer.id()), 1);
  EXPECT_EQ(DeviceStat(1, "allocation.all.current", owner.id()), 0);
  ASSERT_TRUE(importer.Free({imported.allocation().allocation_id()}).ok());
  EXPECT_EQ(DeviceStat(1, "allocation.all.current"), 0);
  EXPECT_EQ(DeviceStat(1, "reserved_bytes.all.current"), 0);  // shareable segments are not cached
}

TEST_F(MemoryServiceTest, EndingASessionReleasesEverythingItHeld) {
  RawSession other(channel_, "other");
  v1::Allocation kept;
  ASSERT_TRUE(other.Allocate(0, 1 << 20, &kept).ok());
  {
    RawSession leaving(channel_, "leaving");
    v1::Allocation a;
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(leaving.Allocate(0, 3 << 20, &a).ok());
    EXPECT_GT(DeviceStat(0, "reserved_bytes.all.current"), 15 << 20);
  }
  EXPECT_EQ(DeviceStat(0, "allocated_bytes.all.current"), 1 << 20);
  EXPECT_EQ(DeviceStat(0, "reserved_bytes.all.current"), 2 << 20);
  EXPECT_EQ(Stat(other, 0, "allocated_bytes.all.current"), 1 << 20);
}

TEST_F(MemoryServiceTest, ReleasedSegmentsAreAnnouncedOnTheSessionStream) {
  RawSession session(channel_, "notice");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(1, 100, &a).ok());
  ASSERT_TRUE(session.Free({a.allocation_id()}).ok());
  v1::EmptyCacheRequest request;
  request.set_all_devices(true);
  v1::EmptyCacheResponse response;
  ASSERT_TRUE(session.memory().EmptyCache(session.Context().get(), request, &response).ok());
  EXPECT_EQ(response.released_segments(), 1u);
  EXPECT_EQ(response.released_bytes(), 2u << 20);
  v1::SessionServerMessage notice;
  ASSERT_TRUE(session.ReadNotice(&notice));
  ASSERT_TRUE(notice.has_segment_released());
  EXPECT_EQ(notice.segment_released().device(), 1);
  EXPECT_EQ(notice.segment_released().segment_id(), a.segment_id());
}

TEST_F(MemoryServiceTest, MemoryFractionCapsReservedBytesWithPyTorchsMessage) {
  RawSession session(channel_, "limited");
  v1::SetMemoryLimitRequest limit;
  limit.set_device(0);
  limit.set_fraction(0.5);  // 32 MiB of 64
  v1::SetMemoryLimitResponse limited;
  ASSERT_TRUE(session.memory().SetMemoryLimit(session.Context().get(), limit, &limited).ok());
  EXPECT_EQ(limited.limit_bytes(), 32u << 20);
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 30 << 20, &a).ok());
  grpc::Status over = session.Allocate(0, 4 << 20, nullptr);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error_message().find(
                "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                "capacity of 64.00 MiB"),
            std::string::npos)
      << over.error_message();
  EXPECT_NE(over.error_message().find("32.00 MiB allowed; "), std::string::npos)
      << over.error_message();
  // Other sessions are not limited by it.
  RawSession free_session(channel_, "unlimited");
  EXPECT_TRUE(free_session.Allocate(0, 20 << 20, nullptr).ok());
}

TEST_F(MemoryServiceTest, SummaryHasPyTorchsLayout) {
  RawSession session(channel_, "summary");
  ASSERT_TRUE(session.Allocate(0, 5 << 20, nullptr).ok());
  v1::GetSummaryRequest request;
  request.set_device(0);
  v1::MemorySummary summary;
  ASSERT_TRUE(session.memory().GetSummary(session.Context().get(), request, &summary).ok());
  std::vector<std::string> lines;
  std::string text = summary.text();
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 47u);
  for (const std::string& line : lines) EXPECT_EQ(line.size(), 77u) << line;
  EXPECT_EQ(lines[1],
            "|                  PyTorch CUDA memory summary, device ID 0                 |");
  EXPECT_EQ(lines[7],
            "| Allocated memory      |   5120 KiB |   5120 KiB |   5120 KiB |      0 B   |");
  EXPECT_EQ(lines[19],
            "| GPU reserved memory   |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |");
}

TEST_F(MemoryServiceTest, SnapshotNamesTheOwningSession) {
  RawSession a(channel_, "a");
  RawSession b(channel_, "b");
  ASSERT_TRUE(a.Allocate(0, 100, nullptr).ok());
  ASSERT_TRUE(b.Allocate(1, 2 << 20, nullptr).ok());
  auto observe = v1::Observe::NewStub(channel_);
  v1::ObserveSnapshotRequest request;
  request.set_all_devices(true);
  v1::MemorySnapshot snapshot;
  grpc::ClientContext context;
  ASSERT_TRUE(observe->GetMemorySnapshot(&context, request, &snapshot).ok());
  ASSERT_EQ(snapshot.segments_size(), 2);
  EXPECT_EQ(snapshot.segments(0).session_id(), a.id());
  EXPECT_EQ(snapshot.segments(0).segment_type(), "small");
  EXPECT_EQ(snapshot.segments(0).blocks(0).state(), "active_allocated");
  EXPECT_EQ(snapshot.segments(1).session_id(), b.id());
  EXPECT_EQ(snapshot.segments(1).device(), 1);
  EXPECT_EQ(snapshot.segments(1).segment_type(), "large");
}

TEST_F(MemoryServiceTest, ListSessionsShowsWhoHoldsWhat) {
  RawSession session(channel_, "lister", "team-a");
  ASSERT_TRUE(session.Allocate(1, 4096, nullptr).ok());
  auto observe = v1::Observe::NewStub(channel_);
  v1::ListSessionsResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(observe->ListSessions(&context, v1::ListSessionsRequest(), &response).ok());
  ASSERT_EQ(response.sessions_size(), 1);
  const v1::SessionInfo& info = response.sessions(0);
  EXPECT_EQ(info.client_name(), "lister");
  EXPECT_EQ(info.tenant(), "team-a");
  EXPECT_EQ(info.pid(), getpid());
  ASSERT_EQ(info.devices_size(), 2);
  EXPECT_EQ(info.devices(1).allocated_bytes(), 4096u);
  EXPECT_EQ(info.devices(1).reserved_bytes(), 2u << 20);
  EXPECT_EQ(info.devices(0).allocated_bytes(), 0u);
}

TEST_F(MemoryServiceTest, CallsWithoutAValidSessionAreUnauthenticated) {
  auto memory = v1::Memory::NewStub(channel_);
  v1::AllocateRequest request;
  request.set_size(512);
  v1::AllocateResponse response;
  {
    grpc::ClientContext context;
    EXPECT_EQ(memory->Allocate(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  RawSession session(channel_, "auth");
  {
    grpc::ClientContext context;
    context.AddMetadata("gpumux-session", std::to_string(session.id()) + ":0000");
    EXPECT_EQ(memory->Allocate(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  auto sessions = v1::Session::NewStub(channel_);
  v1::PingResponse pong;
  ASSERT_TRUE(sessions->Ping(session.Context().get(), v1::PingRequest(), &pong).ok());
  EXPECT_EQ(pong.session_id(), session.id());
}

TEST_F(MemoryServiceTest, FirstStreamMessageMustBeOpen) {
  auto sessions = v1::Session::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = sessions->Open(&context);
  stream->Write(v1::SessionClientMessage());
  stream->WritesDone();
  v1::SessionServerMessage reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A free request is checked in time linear in its size and bounded: 100,000
// ids once took 5.7 s under the lock every session needs.
TEST_F(MemoryServiceTest, FreeRequestsAreBoundedAndCheckedForDuplicatesInLinearTime) {
  RawSession session(channel_, "big-free");
  std::vector<uint64_t> too_many(100000);
  for (size_t i = 0; i < too_many.size(); ++i) too_many[i] = i + 1;
  grpc::Status status = session.Free(too_many);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("100000 allocations; at most 65536"), std::string::npos)
      << status.error_message();

  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  std::vector<uint64_t> twice(65536);
  for (size_t i = 0; i < twice.size(); ++i) twice[i] = a.allocation_id() + 1000 + i;
  twice.back() = twice.front();  // the duplicate is the last id: every pair is compared
  status = session.Free(twice);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("named twice"), std::string::npos)
      << status.error_message();

  v1::AllocateRequest allocate;
  allocate.set_device(0);
  allocate.set_size(4096);
  for (uint64_t id : too_many) allocate.add_free_allocation_ids(id);
  v1::AllocateResponse allocated;
  status = session.memory().Allocate(session.Context().get(), allocate, &allocated);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(session.Free({a.allocation_id()}).ok());
}

TEST_F(MemoryServiceTest, AllocateRefusesMalformedWaitHandlesEvenWithoutFrees) {
  RawSession session(channel_, "bad-handles");
  v1::AllocateRequest request;
  request.set_device(0);
  request.set_size(4096);
  request.add_free_wait_event_handles("short");
  v1::AllocateResponse response;
  grpc::Status status = session.memory().Allocate(session.Context().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("wait event handle of 5 bytes"), std::string::npos)
      << status.error_message();

  request.clear_free_wait_event_handles();
  for (int i = 0; i < 65; ++i) request.add_free_wait_event_handles(std::string(64, 'h'));
  status = session.memory().Allocate(session.Context().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("65 wait event handles; at most 64"), std::string::npos)
      << status.error_message();
}

class ShareLimitTest : public DaemonTest {
 protected:
  Daemon::Options Options() override {
    Daemon::Options options = DaemonTest::Options();
    options.max_share_tokens = 8;
    return options;
  }
  // Shares `id` `count` times as `session`.
  static grpc::Status ShareTimes(RawSession& session, uint64_t id, int count) {
    for (int i = 0; i < count; ++i) {
      v1::ShareRequest request;
      request.set_allocation_id(id);
      v1::ShareResponse response;
      grpc::Status status = session.memory().Share(session.Context().get(), request, &response);
      if (!status.ok()) return status;
    }
    return grpc::Status::OK;
  }
};

// A tenant holds at most a quarter of the daemon's share tokens.
TEST_F(ShareLimitTest, ATenantHoldsAQuarterOfTheShareTokens) {
  RawSession a(channel_, "a", "pod-a");
  RawSession b(channel_, "b", "pod-b");
  v1::Allocation of_a, of_b;
  ASSERT_TRUE(a.Allocate(0, 4096, &of_a, /*shareable=*/true).ok());
  ASSERT_TRUE(b.Allocate(0, 4096, &of_b, /*shareable=*/true).ok());
  ASSERT_TRUE(ShareTimes(a, of_a.allocation_id(), 2).ok());
  grpc::Status refused = ShareTimes(a, of_a.allocation_id(), 1);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("tenant 'pod-a' holds 2 share tokens, a tenant's share"),
            std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(ShareTimes(b, of_b.allocation_id(), 2).ok());
  ASSERT_TRUE(a.Free({of_a.allocation_id()}).ok());  // its tokens go with it
  ASSERT_TRUE(a.Allocate(0, 4096, &of_a, /*shareable=*/true).ok());
  EXPECT_TRUE(ShareTimes(a, of_a.allocation_id(), 2).ok());
}

// 200,000 tokens on one allocation once cost 23 MB: tokens are bounded per
// allocation and daemon-wide, and go with their allocation.
TEST_F(ShareLimitTest, ShareTokensAreBoundedDaemonWide) {
  // Three tenants hold five of the daemon's eight tokens (a tenant's share
  // is two), so that the four below reach the daemon-wide limit.
  std::vector<std::unique_ptr<RawSession>> fillers;
  for (int tokens : {2, 2, 1}) {
    fillers.push_back(
        std::make_unique<RawSession>(channel_, "filler", absl::StrCat("filler-", fillers.size())));
    v1::Allocation filled;
    ASSERT_TRUE(fillers.back()->Allocate(0, 4096, &filled, /*shareable=*/true).ok());
    ASSERT_TRUE(ShareTimes(*fillers.back(), filled.allocation_id(), tokens).ok());
  }
  RawSession owner(channel_, "owner", "pod-owner");
  RawSession other(channel_, "other", "pod-other");
  auto share = [](RawSession& session, uint64_t id) {
    v1::ShareRequest request;
    request.set_allocation_id(id);
    v1::ShareResponse response;
    return session.memory().Share(session.Context().get(), request, &response);
  };
  v1::Allocation a, b;
  ASSERT_TRUE(owner.Allocate(0, 4096, &a, /*shareable=*/true).ok());
  ASSERT_TRUE(other.Allocate(0, 4096, &b, /*shareable=*/true).ok());
  ASSERT_TRUE(share(owner, a.allocation_id()).ok());
  ASSERT_TRUE(share(owner, a.allocation_id()).ok());
  ASSERT_TRUE(share(other, b.allocation_id()).ok());
  grpc::Status refused = share(other, b.allocation_id());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("gpumuxd --max-share-tokens=8"), std::string::npos)
      << refused.error_message();
  ASSERT_TRUE(owner.Free({a.allocation_id()}).ok());  // its two tokens go with it
  EXPECT_TRUE(share(other, b.allocation_id()).ok());
}

}  // namespace
}  // namespace gpumux::testing
