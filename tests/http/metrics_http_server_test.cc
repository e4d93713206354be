// The HTTP listener alone, with small limits, on a real port: connections
// are capped per peer address and in all, whatever order libmicrohttpd's
// threads accept them in; an idle connection and an answer nobody reads
// are cut off at their deadlines, and the listener serves on.

#include "server/http/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gpumux/common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/http/raw_http.h"

namespace gpumux {
namespace {

// More than the sockets between a server and a reader who reads nothing hold.
using ::gpumux::testing::ClosedUnanswered;
using ::gpumux::testing::StatusLine;

constexpr size_t kPageBytes = size_t{16} << 20;

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void Start(MetricsHttpServer::Limits limits) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start({.address = "127.0.0.1:0",
                                  .metrics = [] { return std::string(kPageBytes, '#'); },
                                  .ready = [] { return absl::OkStatus(); },
                                  .limits = limits});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A connection from `source` (a loopback address) whose reads give up
  // after 10 s; a small receive buffer when `small_buffer`.
  UniqueFd Connect(const char* source = "127.0.0.1", bool small_buffer = false) {
    UniqueFd fd(socket(AF_INET, SOCK_STREAM, 0));
    if (small_buffer) {
      const int bytes = 4096;
      setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    }
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(server_->port()));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
        connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      ADD_FAILURE() << "cannot connect from " << source;
      return UniqueFd();
    }
    const timeval timeout{10, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return fd;
  }

  static void Send(int fd, absl::string_view bytes) {
    // A refused connection may be gone already: what matters is its answer.
    (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  // Whether a new connection from `source` is answered within 5 s: the
  // listener counts closes in its own time.
  bool AnsweredSoon(const char* source) {
    for (const absl::Time deadline = absl::Now() + absl::Seconds(5); absl::Now() < deadline;
         absl::SleepFor(absl::Milliseconds(20))) {
      UniqueFd c = Connect(source);
      Send(c.get(), "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      if (StatusLine(c.get()) == "HTTP/1.1 200 OK") return true;
    }
    return false;
  }

  // Reads `fd` until it closes; false if it stays open for 10 s.
  static bool ReadsToItsEnd(int fd, size_t* bytes) {
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0) {
        *bytes += static_cast<size_t>(n);
        continue;
      }
      return n == 0 || errno == ECONNRESET;
    }
  }

  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpServerTest, ConnectionsAreCappedPerAddressAndInAll) {
  Start({.max_connections = 6,
         .max_connections_per_address = 4,
         .request_deadline = absl::Seconds(30)});
  // Many at once, so libmicrohttpd's threads race to accept them.
  std::vector<UniqueFd> first;
  for (int i = 0; i < 12; ++i) first.push_back(Connect("127.0.0.1"));
  EXPECT_EQ(ClosedUnanswered(first, 8, absl::Seconds(5)), 8);

  // Another address gets the rest of the 6, and a third none.
  std::vector<UniqueFd> second;
  for (int i = 0; i < 4; ++i) second.push_back(Connect("127.0.0.2"));
  EXPECT_EQ(ClosedUnanswered(second, 2, absl::Seconds(5)), 2);
  std::vector<UniqueFd> third;
  third.push_back(Connect("127.0.0.3"));
  EXPECT_EQ(ClosedUnanswered(third, 1, absl::Seconds(5)), 1);

  // Those let in are answered; once some close, the third address is too.
  int answered = 0;
  for (const UniqueFd& c : second) {
    Send(c.get(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    if (StatusLine(c.get()) == "HTTP/1.1 200 OK") ++answered;
  }
  EXPECT_EQ(answered, 2);
  first.clear();
  EXPECT_TRUE(AnsweredSoon("127.0.0.3"));
  EXPECT_TRUE(AnsweredSoon("127.0.0.1"));
}

TEST_F(MetricsHttpServerTest, AnIdleConnectionClosesAtTheRequestDeadline) {
  Start({.request_deadline = absl::Milliseconds(500)});
  UniqueFd idle = Connect();
  const absl::Time start = absl::Now();
  size_t bytes = 0;
  EXPECT_TRUE(ReadsToItsEnd(idle.get(), &bytes));
  EXPECT_EQ(bytes, 0u);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(400));

  // After an answer the next head is due by the deadline as well.
  UniqueFd kept = Connect();
  Send(kept.get(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(StatusLine(kept.get()), "HTTP/1.1 200 OK");
  const absl::Time answered = absl::Now();
  EXPECT_TRUE(ReadsToItsEnd(kept.get(), &bytes));
  EXPECT_GE(absl::Now() - answered, absl::Milliseconds(400));
}

// Prometheus keeps its connection between scrapes; a body sent with a GET
// is read and dropped.
TEST_F(MetricsHttpServerTest, AConnectionServesRequestsInTurn) {
  Start({});
  UniqueFd c = Connect();
  Send(c.get(),
       "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
       "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
       "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  size_t bytes = 0;
  std::string replies;
  char buffer[4096];
  for (ssize_t n; (n = recv(c.get(), buffer, sizeof(buffer), 0)) > 0;) {
    replies.append(buffer, static_cast<size_t>(n));
  }
  int answers = 0;
  for (size_t at = 0; (at = replies.find("HTTP/1.1 200 OK\r\n", at)) != std::string::npos; ++at) {
    ++answers;
  }
  EXPECT_EQ(answers, 3) << replies;
  EXPECT_TRUE(ReadsToItsEnd(c.get(), &bytes));
}

TEST_F(MetricsHttpServerTest, AnAnswerNobodyReadsIsCutOffAtItsDeadline) {
  Start({.answer_deadline = absl::Seconds(1)});
  UniqueFd slow = Connect("127.0.0.1", /*small_buffer=*/true);
  Send(slow.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  absl::SleepFor(absl::Seconds(3));
  size_t bytes = 0;
  EXPECT_TRUE(ReadsToItsEnd(slow.get(), &bytes)) << "the unread answer was not cut off";
  EXPECT_LT(bytes, kPageBytes);
  // A reader in time gets the whole page.
  Start({});
  UniqueFd reader = Connect();
  Send(reader.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  bytes = 0;
  EXPECT_TRUE(ReadsToItsEnd(reader.get(), &bytes));
  EXPECT_GT(bytes, kPageBytes);
}

}  // namespace
}  // namespace gpumux
