// The memory socket (common/ipc/memory_socket.h, server/rpc/memory_socket_server.h)
// end to end against an in-process daemon: what it hands out, and every bad
// request answered with the exact code and a message saying what was wrong,
// after which the daemon (and the same connection, where the protocol
// allows) serves on.

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/ipc/fd_passing.h"
#include "common/ipc/memory_socket.h"
#include "gmock/gmock.h"
#include "gpumux/common/sealed_memory.h"
#include "gtest/gtest.h"
#include "server/core/session_registry.h"
#include "tests/rpc/daemon_fixture.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

// One raw connection to the memory socket.
class RawMemorySocket {
 public:
  explicit RawMemorySocket(const std::string& path) {
    absl::StatusOr<UniqueFd> socket = ConnectMemorySocket(path);
    if (socket.ok()) socket_ = *std::move(socket);
  }
  bool connected() const { return socket_.valid(); }

  // Sends `payload` (with `fds`) and returns the reply's status; `fds_back`
  // receives how many descriptors came with it.
  absl::Status Ask(const std::string& payload, std::vector<int> fds = {},
                   size_t* fds_back = nullptr) {
    if (absl::Status sent = SendFds(socket_.get(), payload, fds); !sent.ok()) return sent;
    absl::StatusOr<PassedMessage> reply = ReceiveFds(socket_.get());
    if (!reply.ok()) return reply.status();
    if (fds_back != nullptr) *fds_back = reply->fds.size();
    uint64_t size = 0;
    return ParseMemoryReply(reply->payload, &size);
  }
  int fd() const { return socket_.get(); }

 private:
  UniqueFd socket_;
};

class MemorySocketTest : public DaemonTest {
 protected:
  std::string MemoryPath() const { return MemorySocketPath(socket_path()); }
  std::string StagingKey(RawSession& session) {
    v1::GetStagingBufferRequest request;
    v1::StagingBuffer buffer;
    EXPECT_TRUE(session.copy().GetStagingBuffer(session.Context().get(), request, &buffer).ok());
    return buffer.handle().data();
  }
};

TEST_F(MemorySocketTest, TheSocketSitsNextToTheGrpcOneWithItsMode) {
  struct stat st {};
  ASSERT_EQ(stat(MemoryPath().c_str(), &st), 0) << MemoryPath();
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(MemoryPath(), socket_path() + ".memfd");
}

TEST_F(MemorySocketTest, HandsAnAllocationsSegmentToItsSessionOnOneConnection) {
  RawSession session(channel_, "fetch");
  v1::Allocation a, b;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  ASSERT_TRUE(session.Allocate(1, 4096, &b).ok());
  RawMemorySocket socket(MemoryPath());
  ASSERT_TRUE(socket.connected());
  for (const v1::Allocation* allocation : {&a, &b, &a}) {
    size_t fds = 0;
    EXPECT_OK(socket.Ask(
        FormatMemoryRequest(session.credentials(), allocation->segment_handle().data()), {}, &fds));
    EXPECT_EQ(fds, 1u);
  }
}

TEST_F(MemorySocketTest, BadRequestsGetPreciseAnswersAndTheConnectionServesOn) {
  RawSession session(channel_, "bad");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  const std::string key = a.segment_handle().data();
  const std::string credentials = session.credentials();
  RawMemorySocket socket(MemoryPath());
  ASSERT_TRUE(socket.connected());
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  struct Case {
    std::string payload;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"hello", kInvalid, "starts with \"gmxmem1 \""},
      {"gmxmem2 " + credentials + " " + key, kInvalid, "starts with \"gmxmem1 \""},
      {"gmxmem1 " + credentials, kInvalid, "<session_id>:<secret> <key>"},
      {"gmxmem1 " + credentials + " " + key + " extra", kInvalid, "<session_id>:<secret> <key>"},
      {"gmxmem1  " + credentials + " " + key, kInvalid, "<session_id>:<secret> <key>"},
      {"gmxmem1 " + credentials + " " + key.substr(1), kInvalid, "32 lowercase hex digits"},
      {"gmxmem1 " + credentials + " " + std::string(32, 'G'), kInvalid, "32 lowercase hex digits"},
      {"gmxmem1 " + credentials + " /gpumux-1-x", kInvalid, "32 lowercase hex digits"},
      {FormatMemoryRequest("nocolon", key), absl::StatusCode::kUnauthenticated, "malformed"},
      {FormatMemoryRequest(absl::StrCat(session.id(), ":", std::string(32, '0')), key),
       absl::StatusCode::kUnauthenticated, "secret does not match"},
      {FormatMemoryRequest("999999:" + session.secret(), key), absl::StatusCode::kUnauthenticated,
       "not open"},
      {FormatMemoryRequest(credentials, std::string(32, 'a')), absl::StatusCode::kNotFound,
       "no shared memory is filed under key"},
      {std::string("\xff\xfe\x00garbage", 10), kInvalid, "starts with"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(socket.Ask(c.payload), StatusIs(c.code, HasSubstr(c.message))) << c.payload;
  }
  // A request carrying descriptors: refused, and they are not kept.
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  EXPECT_THAT(socket.Ask(FormatMemoryRequest(credentials, key), {pipe_fds[0]}),
              StatusIs(kInvalid, HasSubstr("carries no descriptors")));
  // The daemon closed its copy before it answered: the pipe has no reader.
  close(pipe_fds[0]);
  signal(SIGPIPE, SIG_IGN);
  char byte = 0;
  EXPECT_EQ(write(pipe_fds[1], &byte, 1), -1);
  EXPECT_EQ(errno, EPIPE);
  close(pipe_fds[1]);
  // The same connection still serves a good request.
  EXPECT_OK(socket.Ask(FormatMemoryRequest(credentials, key)));
  EXPECT_TRUE(session.Ping().ok());
}

// MemoryFileFetcher: Fetch checks that what arrived is a sealed memory file
// of the expected size; FetchDescriptor (for a CUDA page's descriptor, which
// only the driver can check) checks the size the daemon states.
TEST_F(MemorySocketTest, TheFetcherHandsOutFilesAndDescriptors) {
  RawSession session(channel_, "fetcher");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  const std::string key = a.segment_handle().data();
  MemoryFileFetcher fetcher(MemoryPath(), session.credentials());
  absl::StatusOr<SealedMemory> file = fetcher.Fetch(key, a.segment_size());
  ASSERT_OK(file);
  EXPECT_EQ(file->size(), a.segment_size());
  absl::StatusOr<UniqueFd> descriptor = fetcher.FetchDescriptor(key, a.segment_size());
  ASSERT_OK(descriptor);
  struct stat st {};
  ASSERT_EQ(fstat(descriptor->get(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), a.segment_size());
  EXPECT_THAT(fetcher.FetchDescriptor(key, a.segment_size() + 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not the")));
  EXPECT_THAT(fetcher.FetchDescriptor(std::string(32, 'b'), 4096),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_OK(fetcher.Fetch(key, a.segment_size()).status());  // the connection serves on
}

TEST_F(MemorySocketTest, AnOversizedRequestClosesOnlyItsConnection) {
  RawSession session(channel_, "oversize");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  RawMemorySocket socket(MemoryPath());
  ASSERT_TRUE(socket.connected());
  const std::string huge(kMaxPassedPayload + 100, 'x');
  ASSERT_EQ(send(socket.fd(), huge.data(), huge.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(huge.size()));
  // Told why, then closed.
  absl::StatusOr<PassedMessage> reply = ReceiveFds(socket.fd());
  ASSERT_OK(reply);
  uint64_t size = 0;
  EXPECT_THAT(ParseMemoryReply(reply->payload, &size),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("was cut short")));
  char byte;
  EXPECT_EQ(recv(socket.fd(), &byte, 1, 0), 0) << "the connection stayed open";
  RawMemorySocket next(MemoryPath());
  ASSERT_TRUE(next.connected());
  EXPECT_OK(next.Ask(FormatMemoryRequest(session.credentials(), a.segment_handle().data())));
}

// 200 descriptors on one request (past what a request's control buffer
// takes): they are closed, the peer is told why, and the connection closes.
TEST_F(MemorySocketTest, ARequestWithTooManyDescriptorsIsAnsweredAndClosed) {
  RawMemorySocket socket(MemoryPath());
  ASSERT_TRUE(socket.connected());
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  std::vector<int> fds(200, pipe_fds[0]);
  const std::string payload = "gmxmem1 x y";
  iovec io{const_cast<char*>(payload.data()), payload.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  ASSERT_EQ(sendmsg(socket.fd(), &message, MSG_NOSIGNAL), static_cast<ssize_t>(payload.size()));
  close(pipe_fds[0]);
  absl::StatusOr<PassedMessage> reply = ReceiveFds(socket.fd());
  ASSERT_OK(reply);
  uint64_t size = 0;
  EXPECT_THAT(
      ParseMemoryReply(reply->payload, &size),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("16 descriptors was cut short")));
  char byte;
  EXPECT_EQ(recv(socket.fd(), &byte, 1, 0), 0) << "the connection stayed open";
  // Every copy the daemon received is closed: the pipe has no reader.
  signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(write(pipe_fds[1], &byte, 1), -1);
  EXPECT_EQ(errno, EPIPE);
  close(pipe_fds[1]);
}

class MemorySocketIdleTest : public MemorySocketTest {
 protected:
  Daemon::Options Options() override {
    Daemon::Options options = MemorySocketTest::Options();
    options.memory_socket_idle_timeout = absl::Milliseconds(200);
    return options;
  }
};

// 8,192 idle connections used to lock every other client out of its
// memory: idle ones close, and the client's fetcher connects again.
TEST_F(MemorySocketIdleTest, IdleConnectionsCloseAndClientsConnectAgain) {
  RawSession session(channel_, "idle");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  RawMemorySocket idle(MemoryPath());
  ASSERT_TRUE(idle.connected());
  MemoryFileFetcher fetcher(MemoryPath(), session.credentials());
  ASSERT_OK(fetcher.Fetch(a.segment_handle().data(), a.segment_size()).status());
  // Closed once idle for 200 ms (the sweep runs every 50 ms).
  char byte;
  const timeval patience{10, 0};
  setsockopt(idle.fd(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  EXPECT_EQ(recv(idle.fd(), &byte, 1, 0), 0) << "the idle connection stayed open";
  absl::SleepFor(absl::Milliseconds(400));
  // The fetcher's connection closed too; it connects again.
  EXPECT_OK(fetcher.Fetch(a.segment_handle().data(), a.segment_size()).status());
}

// One uid holds at most 1,024 connections; the next is told why.
TEST_F(MemorySocketTest, OneUidHoldsAtMost1024Connections) {
  // The caps follow the descriptors the daemon keeps for connections.
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max < 16384) GTEST_SKIP() << "needs a descriptor limit of 16,384 at least";
  std::vector<std::unique_ptr<RawMemorySocket>> held;
  for (int i = 0; i < 1024; ++i) {
    held.push_back(std::make_unique<RawMemorySocket>(MemoryPath()));
    ASSERT_TRUE(held.back()->connected());
  }
  RawMemorySocket over(MemoryPath());
  ASSERT_TRUE(over.connected());
  absl::StatusOr<PassedMessage> reply = ReceiveFds(over.fd());
  ASSERT_OK(reply);
  uint64_t size = 0;
  EXPECT_THAT(ParseMemoryReply(reply->payload, &size),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat("uid ", geteuid(),
                                              " has 1024 connections open, the most one user "
                                              "may"))));
  held.clear();
}

TEST_F(MemorySocketTest, AStagingBufferIsItsSessionsAlone) {
  RawSession owner(channel_, "owner");
  RawSession other(channel_, "other");
  const std::string key = StagingKey(owner);
  RawMemorySocket socket(MemoryPath());
  ASSERT_TRUE(socket.connected());
  EXPECT_THAT(
      socket.Ask(FormatMemoryRequest(other.credentials(), key)),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("belongs to another session")));
  EXPECT_OK(socket.Ask(FormatMemoryRequest(owner.credentials(), key)));
}

TEST_F(MemorySocketTest, ReleasedMemoryAndEndedSessionsAreRefused) {
  auto session = std::make_unique<RawSession>(channel_, "ending");
  v1::Allocation a;
  ASSERT_TRUE(session->Allocate(0, 4096, &a).ok());
  const std::string key = a.segment_handle().data();
  const std::string credentials = session->credentials();
  RawMemorySocket socket(MemoryPath());
  ASSERT_TRUE(socket.connected());
  EXPECT_OK(socket.Ask(FormatMemoryRequest(credentials, key)));
  ASSERT_TRUE(session->Close().ok());
  session.reset();
  // The daemon ends the session as the stream closes; give it a moment.
  const auto answer_within = [&](const std::string& request, absl::StatusCode code) {
    absl::Status status;
    for (int i = 0; i < 200; ++i) {
      status = socket.Ask(request);
      if (status.code() == code) break;
      usleep(10000);
    }
    return status;
  };
  EXPECT_THAT(
      answer_within(FormatMemoryRequest(credentials, key), absl::StatusCode::kUnauthenticated),
      StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("not open")));
  // Its segment went back to the daemon with it: another session holding
  // the key finds nothing.
  RawSession later(channel_, "later");
  EXPECT_THAT(
      answer_within(FormatMemoryRequest(later.credentials(), key), absl::StatusCode::kNotFound),
      StatusIs(absl::StatusCode::kNotFound));
}

// The memory socket belongs to the socket group as the gRPC socket does, and
// a session's memory goes only to processes of the uid that fetched first:
// another user holding the session's credentials gets PERMISSION_DENIED.
TEST(MemorySocketPeerTest, TheSocketGroupMayConnectButStolenCredentialsAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  TempDir dir;
  gid_t gid = 0;
  const Daemon::Options options = NogroupSocketOptions(dir, &gid);
  ASSERT_FALSE(HasFailure());
  auto daemon = Daemon::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string memory_path = MemorySocketPath(options.socket_path);
  struct stat st {};
  ASSERT_EQ(stat(memory_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(st.st_mode & 0777, 0660u);

  RawSession session(
      grpc::CreateChannel("unix://" + options.socket_path, grpc::InsecureChannelCredentials()),
      "owner");
  v1::Allocation a;
  ASSERT_TRUE(session.Allocate(0, 4096, &a).ok());
  const std::string request = FormatMemoryRequest(session.credentials(), a.segment_handle().data());
  // The owner (root) fetches first: the session's memory is root's now.
  RawMemorySocket owner(memory_path);
  ASSERT_TRUE(owner.connected());
  ASSERT_OK(owner.Ask(request));

  // Uid nobody in the socket group, with the session's credentials: it may
  // connect, and is refused. The child exits with the reply's code.
  const pid_t child = fork();
  if (child == 0) {
    const gid_t groups[] = {gid};
    if (setgroups(1, groups) != 0 || setgid(1) != 0 || setuid(65534) != 0) _exit(100);
    RawMemorySocket thief(memory_path);
    if (!thief.connected()) _exit(101);
    _exit(static_cast<int>(thief.Ask(request).code()));
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_OK(owner.Ask(request)) << "the owner still gets its memory";
}

TEST(SessionRegistryPeerTest, TheFirstFetchFixesTheSessionsUid) {
  class NoSink final : public NoticeSink {
   public:
    void SegmentReleased(DeviceIndex, SegmentId, uint64_t, uint64_t) override {}
    void AskReleaseCached(uint64_t, DeviceIndex) override {}
    void AskLeaseBlocks(uint64_t) override {}
    void StartProfiling(uint64_t, uint64_t) override {}
    void StopProfiling(uint64_t) override {}
    void Terminate(SessionEndReason, absl::string_view) override {}
  };
  SessionRegistry registry;
  absl::StatusOr<OpenedSession> opened =
      registry.Open(SessionRecord{.client_name = "peer"}, std::make_shared<NoSink>());
  ASSERT_OK(opened);
  const SessionId id = opened->info.id;
  EXPECT_OK(registry.BindMemoryPeer(id, 1000));
  EXPECT_OK(registry.BindMemoryPeer(id, 1000));
  EXPECT_THAT(
      registry.BindMemoryPeer(id, 1001),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("a process of uid 1001 may not")));
  EXPECT_THAT(registry.BindMemoryPeer(SessionId(id.value() + 1), 1000),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

}  // namespace
}  // namespace gpumux::testing
