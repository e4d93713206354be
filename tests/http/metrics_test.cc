// The daemon's HTTP listener against a real in-process daemon on a real
// port: what /metrics says of devices, sessions and calls equals what the
// daemon's other views say, series of ended sessions disappear, and bad
// HTTP gets its status while the daemon serves on; hostile clients (header
// floods, slow heads, many connections, range amplification) cannot grow
// the daemon or keep the probes out.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/common/unique_fd.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/http/metrics_scrape.h"
#include "tests/http/raw_http.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux {
namespace {

using ::gpumux::testing::ClosedUnanswered;
using ::gpumux::testing::IsOk;
using ::gpumux::testing::MetricsScrape;
using ::gpumux::testing::StatusIs;
using ::gpumux::testing::StatusLine;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

class MetricsTest : public testing::DaemonClientTest {
 protected:
  MetricsTest() : DaemonClientTest(MakeOptions()) {}

  static Options MakeOptions() {
    Options options;
    options.daemon.metrics_listen = "127.0.0.1:0";
    options.client.client_name = "trainer";
    options.client.tenant = "team-a";
    options.client.labels = {{"pod", "trainer-0"}, {"namespace", "ml"}, {"container", "main"}};
    return options;
  }

  httplib::Client Http() {
    httplib::Client http("127.0.0.1", daemon().metrics_port());
    http.set_read_timeout(10, 0);
    return http;
  }

  MetricsScrape Scrape() {
    httplib::Client http = Http();
    httplib::Result result = http.Get("/metrics");
    if (!result) {
      ADD_FAILURE() << "GET /metrics failed: " << httplib::to_string(result.error());
      return MetricsScrape("");
    }
    EXPECT_EQ(result->status, 200);
    EXPECT_EQ(result->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    return MetricsScrape(result->body);
  }

  std::map<std::string, std::string> SessionOf(const Client& c, int gpu = 0) {
    return {{"gpu", absl::StrCat(gpu)}, {"session", absl::StrCat(c.session_id().value())}};
  }

  // A connection to the HTTP port whose reads and writes give up after 10 s.
  UniqueFd Connect() {
    UniqueFd fd(socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(daemon().metrics_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ADD_FAILURE() << "connect to the HTTP port failed";
      return UniqueFd();
    }
    const timeval timeout{10, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    return fd;
  }

  // Sends all of `bytes`, or as much as the server takes before it closes.
  static bool SendAll(int fd, absl::string_view bytes) {
    for (size_t sent = 0; sent < bytes.size();) {
      const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // What the server sends on `fd` until it closes it (or 10 s pass).
  static std::string ReadToEnd(int fd) {
    std::string reply;
    char buffer[4096];
    for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
      reply.append(buffer, static_cast<size_t>(n));
    }
    return reply;
  }

  // Sends a raw request and returns the status line.
  std::string RawRequest(const std::string& request) {
    UniqueFd fd = Connect();
    if (!fd.valid()) return "connect failed";
    SendAll(fd.get(), request);  // the server may answer and close before reading it all
    return StatusLine(fd.get());
  }
};

TEST_F(MetricsTest, SessionFiguresEqualTheSessionsOwnStats) {
  auto buffer = memory::Allocate(client(), 3 * kMiB);
  ASSERT_THAT(buffer, IsOk());
  auto stream = client().CreateStream(DeviceIndex(0));
  ASSERT_THAT(stream, IsOk());
  auto event = client().CreateEvent(DeviceIndex(0));
  ASSERT_THAT(event, IsOk());
  absl::StatusOr<int64_t> allocated = memory::MemoryAllocated(client(), DeviceIndex(0));
  ASSERT_THAT(allocated, IsOk());

  MetricsScrape scrape = Scrape();
  const auto labels = SessionOf(client());
  const std::vector<testing::MetricSample> samples =
      scrape.Find("gpumux_session_allocated_bytes", labels);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].value, static_cast<double>(*allocated));
  EXPECT_EQ(samples[0].labels.at("client"), "trainer");
  EXPECT_EQ(samples[0].labels.at("tenant"), "team-a");
  EXPECT_EQ(samples[0].labels.at("pod"), "trainer-0");
  EXPECT_EQ(samples[0].labels.at("namespace"), "ml");
  EXPECT_EQ(samples[0].labels.at("container"), "main");
  EXPECT_EQ(samples[0].labels.count("pid"), 0u);
  EXPECT_GE(scrape.Value("gpumux_session_reserved_bytes", labels).value_or(0), 3.0 * kMiB);
  EXPECT_GE(scrape.Value("gpumux_session_peak_allocated_bytes", labels).value_or(0),
            static_cast<double>(*allocated));
  EXPECT_EQ(scrape.Value("gpumux_session_allocations", labels), 1);
  const std::map<std::string, std::string> session = {
      {"session", absl::StrCat(client().session_id().value())}};
  EXPECT_EQ(scrape.Value("gpumux_session_streams", session), 1);
  EXPECT_EQ(scrape.Value("gpumux_session_events", session), 1);
  // Nothing on device 1: no series for it.
  EXPECT_TRUE(scrape.Find("gpumux_session_allocated_bytes", SessionOf(client(), 1)).empty());
  // No limit set: no limit series.
  EXPECT_TRUE(scrape.Find("gpumux_session_memory_limit_bytes", labels).empty());
  ASSERT_THAT(memory::SetPerProcessMemoryFraction(client(), 0.5, DeviceIndex(0)), IsOk());
  EXPECT_EQ(Scrape().Value("gpumux_session_memory_limit_bytes", labels), 32.0 * kMiB);
}

TEST_F(MetricsTest, DeviceFiguresAndBuildInfo) {
  auto buffer = memory::Allocate(client(), 5 * kMiB, DeviceIndex(1));
  ASSERT_THAT(buffer, IsOk());
  MetricsScrape scrape = Scrape();
  for (int gpu : {0, 1}) {
    const std::map<std::string, std::string> device = {{"gpu", absl::StrCat(gpu)}};
    EXPECT_EQ(scrape.Value("gpumux_device_total_bytes", device), 64.0 * kMiB);
    EXPECT_EQ(scrape.Value("gpumux_device_healthy", device), 1);
    EXPECT_TRUE(scrape.Value("gpumux_device_free_bytes", device).has_value());
    EXPECT_EQ(scrape.Value("gpumux_device_ooms_total", device), 0);
  }
  const std::map<std::string, std::string> gpu1 = {{"gpu", "1"}};
  EXPECT_GE(scrape.Value("gpumux_device_allocated_bytes", gpu1).value_or(0), 5.0 * kMiB);
  EXPECT_GE(scrape.Value("gpumux_device_active_bytes", gpu1).value_or(0), 5.0 * kMiB);
  EXPECT_EQ(scrape.Value("gpumux_device_requested_bytes", gpu1).value_or(0), 5.0 * kMiB);
  EXPECT_GE(scrape.Value("gpumux_device_reserved_bytes", gpu1).value_or(0), 5.0 * kMiB);
  EXPECT_GE(scrape.Value("gpumux_device_segments", gpu1).value_or(0), 1);
  EXPECT_EQ(scrape.Value("gpumux_build_info", {{"backend", "host"}}), 1);
  EXPECT_EQ(scrape.Value("gpumux_sessions"), 1);

  // An allocation larger than what is free is an OOM, counted on its device.
  auto most = memory::Allocate(client(), 40 * kMiB, DeviceIndex(1));
  ASSERT_THAT(most, IsOk());
  EXPECT_THAT(memory::Allocate(client(), 40 * kMiB, DeviceIndex(1)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  MetricsScrape after = Scrape();
  EXPECT_EQ(after.Value("gpumux_device_ooms_total", gpu1), 1);
  EXPECT_EQ(after.Value("gpumux_device_ooms_total", {{"gpu", "0"}}), 0);
}

TEST_F(MetricsTest, EndedSessionsSeriesDisappearAndAreCounted) {
  std::unique_ptr<Client> other = ConnectAnother({.client_name = "short-lived"});
  ASSERT_NE(other, nullptr);
  const auto labels = SessionOf(*other);
  auto held = memory::Allocate(*other, 2 * kMiB);
  ASSERT_THAT(held, IsOk());
  auto shared = memory::Allocate(*other, kMiB, DeviceIndex(0), {.shareable = true});
  ASSERT_THAT(shared, IsOk());
  absl::StatusOr<std::string> token = memory::Share(*other, *shared);
  ASSERT_THAT(token, IsOk());
  auto imported = memory::Import(client(), *token);
  ASSERT_THAT(imported, IsOk());

  MetricsScrape before = Scrape();
  ASSERT_EQ(before.Find("gpumux_session_allocated_bytes", labels).size(), 1u);
  EXPECT_EQ(before.Value("gpumux_share_tokens_issued_total"), 1);
  EXPECT_EQ(before.Value("gpumux_share_tokens_redeemed_total"), 1);
  EXPECT_EQ(before.Value("gpumux_session_imported_bytes", SessionOf(client())), 2.0 * kMiB);
  EXPECT_EQ(before.Value("gpumux_sessions_opened_total"), 2);
  EXPECT_EQ(before.Value("gpumux_sessions"), 2);

  // The client ends; the daemon returns its segments.
  *held = DeviceBuffer();
  *shared = DeviceBuffer();
  other.reset();
  MetricsScrape after = Scrape();
  for (const char* name : {"gpumux_session_allocated_bytes", "gpumux_session_reserved_bytes",
                           "gpumux_session_streams"}) {
    EXPECT_TRUE(after.Find(name, {{"session", labels.at("session")}}).empty()) << name;
  }
  EXPECT_EQ(after.Value("gpumux_sessions"), 1);
  EXPECT_EQ(after.Value("gpumux_sessions_ended_total", {{"reason", "closed"}}), 1);
  for (const char* reason : {"crashed", "killed", "shutdown", "protocol_error"})
    EXPECT_EQ(after.Value("gpumux_sessions_ended_total", {{"reason", reason}}), 0) << reason;
}

TEST_F(MetricsTest, CallsAreCountedByMethodAndCode) {
  ASSERT_FALSE(daemon().Sessions().empty());
  MetricsScrape scrape = Scrape();
  const std::map<std::string, std::string> list = {{"grpc_service", "gpumux.v1.Observe"},
                                                   {"grpc_method", "ListSessions"},
                                                   {"grpc_type", "unary"}};
  std::map<std::string, std::string> ok = list;
  ok["grpc_code"] = "OK";
  const double handled = scrape.Value("grpc_server_handled_total", ok).value_or(0);
  EXPECT_GE(handled, 1);
  EXPECT_GE(scrape.Value("grpc_server_started_total", list).value_or(0), handled);
  const double count = scrape.Value("grpc_server_handling_seconds_count", list).value_or(-1);
  EXPECT_GE(count, handled);
  std::map<std::string, std::string> inf = list;
  inf["le"] = "+Inf";
  EXPECT_EQ(scrape.Value("grpc_server_handling_seconds_bucket", inf), count);
  EXPECT_GT(scrape.Value("grpc_server_handling_seconds_sum", list).value_or(0), 0);
  // The session stream is a bidirectional stream, started and not yet handled.
  EXPECT_GE(scrape
                .Value("grpc_server_started_total", {{"grpc_service", "gpumux.v1.Session"},
                                                     {"grpc_method", "Open"},
                                                     {"grpc_type", "bidi_stream"}})
                .value_or(0),
            1);
  // Methods never called are started 0 times, with no histogram; no method
  // the daemon lacks is listed.
  const std::map<std::string, std::string> never = {{"grpc_service", "gpumux.v1.Random"},
                                                    {"grpc_method", "ManualSeed"}};
  EXPECT_EQ(scrape.Value("grpc_server_started_total", never), 0);
  EXPECT_TRUE(scrape.Find("grpc_server_handling_seconds_count", never).empty());
  EXPECT_TRUE(scrape.Find("grpc_server_started_total", {{"grpc_service", "unknown"}}).empty());
}

TEST_F(MetricsTest, HealthAndReadiness) {
  httplib::Client http = Http();
  httplib::Result health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  httplib::Result ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
}

TEST_F(MetricsTest, BadRequestsGetTheirStatusAndTheDaemonServesOn) {
  httplib::Client http = Http();
  httplib::Result unknown = http.Get("/metrics/../admin");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  httplib::Result missing = http.Get("/nothing-here");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_THAT(missing->body, HasSubstr("/metrics, /healthz and /readyz"));
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    const std::string status =
        RawRequest(absl::StrCat(method,
                                " /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                                "Connection: close\r\n\r\n"));
    EXPECT_EQ(status, "HTTP/1.1 405 Method Not Allowed") << method;
  }
  httplib::Result posted = http.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 405);
  EXPECT_EQ(posted->get_header_value("Allow"), "GET, HEAD");
  httplib::Result head = http.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());

  // A header line of 64 KiB, a URI of 64 KiB, garbage, an unknown method.
  EXPECT_EQ(RawRequest(absl::StrCat("GET /metrics HTTP/1.1\r\nConnection: close\r\nX-Big: ",
                                    std::string(64 << 10, 'a'), "\r\n\r\n")),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(RawRequest(absl::StrCat("GET /", std::string(64 << 10, 'a'),
                                    " HTTP/1.1\r\nConnection: close\r\n\r\n")),
            "HTTP/1.1 414 URI Too Long");
  EXPECT_EQ(RawRequest("\x01\x02\x03 garbage\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(RawRequest("BREW /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 405 Method Not Allowed");
  // Still serving, HTTP and gRPC.
  httplib::Result metrics = Http().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(memory::Allocate(client(), kMiB), IsOk());
}

// Endless header lines, each under any per-line limit: the request is
// refused once its head outgrows the connection's memory, long before the
// client has sent 16 MiB (it used to take gigabytes of the daemon's memory).
TEST_F(MetricsTest, AHeaderFloodIsRefusedEarly) {
  UniqueFd fd = Connect();
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(SendAll(fd.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  const std::string line = absl::StrCat("X-Flood: ", std::string(1000, 'a'), "\r\n");
  size_t sent = 0;
  while (sent < (16u << 20) && SendAll(fd.get(), line)) sent += line.size();
  EXPECT_LT(sent, 16u << 20) << "the server read 16 MiB of headers";
  shutdown(fd.get(), SHUT_WR);
  const std::string reply = ReadToEnd(fd.get());
  if (!reply.empty()) {  // the reply may be lost to the reset of unread data
    EXPECT_EQ(reply.substr(0, reply.find("\r\n")), "HTTP/1.1 431 Request Header Fields Too Large");
  }
  httplib::Result health = Http().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// Range is ignored: 2,700 ranges of the whole page in 8 KiB get the page
// once (it used to be sent 2,700 times, 330x the page).
TEST_F(MetricsTest, RangeIsIgnored) {
  httplib::Client http = Http();
  httplib::Result plain = http.Get("/metrics");
  ASSERT_TRUE(plain);
  std::string ranges = "bytes=0-";
  for (int i = 1; i < 2700; ++i) ranges += ",0-";
  httplib::Result ranged = http.Get("/metrics", {{"Range", ranges}});
  ASSERT_TRUE(ranged);
  EXPECT_EQ(ranged->status, 200);
  EXPECT_FALSE(ranged->has_header("Content-Range"));
  EXPECT_LT(ranged->body.size(), 2 * plain->body.size() + 4096);
}

// 64 connections trickling their heads a byte a second do not hold up the
// probes (Kubernetes' default timeout, 1 s), and each is closed once its
// head is 5 s overdue.
TEST_F(MetricsTest, SlowHeadsDoNotHoldUpProbesAndMeetTheDeadline) {
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 64; ++i) {
    slow.push_back(Connect());
    ASSERT_TRUE(slow.back().valid());
    ASSERT_TRUE(SendAll(slow.back().get(), "G"));
  }
  const absl::Time start = absl::Now();
  std::atomic<bool> done{false};
  std::atomic<int> closed{0};
  std::thread trickle([&] {
    std::vector<bool> open(slow.size(), true);
    while (!done.load() && closed.load() < static_cast<int>(slow.size())) {
      for (size_t i = 0; i < slow.size(); ++i) {
        if (open[i] && !SendAll(slow[i].get(), "E")) {
          open[i] = false;
          closed.fetch_add(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  httplib::Client probe("127.0.0.1", daemon().metrics_port());
  probe.set_connection_timeout(1, 0);
  probe.set_read_timeout(1, 0);
  int answered = 0;
  for (int i = 0; i < 12; ++i) {
    httplib::Result health = probe.Get("/healthz");
    if (health && health->status == 200) ++answered;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_EQ(answered, 12);
  // A shut-down socket fails the second send after it at the latest.
  while (closed.load() < static_cast<int>(slow.size()) && absl::Now() - start < absl::Seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  done.store(true);
  trickle.join();
  EXPECT_EQ(closed.load(), 64);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// One address holds at most 128 connections at once; the rest are closed
// unanswered, and the probes get through again once those close.
TEST_F(MetricsTest, ConnectionsPerAddressAreCapped) {
  // libmicrohttpd's threads accept in their own order, so which two of the
  // 130 are closed is theirs to pick; how many is not. The 128 send
  // nothing, so they stay open until their request deadline (5 s).
  std::vector<UniqueFd> held;
  for (int i = 0; i < 130; ++i) {
    held.push_back(Connect());
    ASSERT_TRUE(held.back().valid());
  }
  const int refused = ClosedUnanswered(held, 2, absl::Seconds(3));
  EXPECT_EQ(refused, 2) << "of 130 connections from one address";
  held.clear();
  // libmicrohttpd counts the closes in its own time.
  int status = 0;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       status != 200 && absl::Now() < deadline;) {
    httplib::Result health = Http().Get("/healthz");
    status = health ? health->status : 0;
    if (status != 200) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace gpumux
