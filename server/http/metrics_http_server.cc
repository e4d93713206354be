#include "server/http/metrics_http_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <microhttpd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/unique_fd.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr const char* kPaths = "/metrics, /healthz and /readyz";
// Prometheus's text format, version 0.0.4.
constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextType = "text/plain; charset=utf-8";

// RFC 9110's token: what a method must be.
bool IsToken(absl::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
  });
}

// A bound, listening TCP socket for `address`, or why there is none.
absl::StatusOr<UniqueFd> Listen(absl::string_view flag_value, const HostPort& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(address.port);
  const int resolved = getaddrinfo(address.host.empty() ? nullptr : address.host.c_str(),
                                   port.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics-listen ", flag_value,
                                                   ": cannot resolve '", address.host,
                                                   "': ", gai_strerror(resolved)));
  }
  std::string why = "no address";
  UniqueFd listener;
  for (const addrinfo* a = found; a != nullptr && !listener.valid(); a = a->ai_next) {
    UniqueFd fd(
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd.valid()) {
      why = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(fd.get(), SOMAXCONN) != 0) {
      why = std::strerror(errno);
      continue;
    }
    listener = std::move(fd);
  }
  freeaddrinfo(found);
  if (!listener.valid()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on --metrics-listen ", flag_value, ": ", why));
  }
  return listener;
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t size = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size) != 0) return -1;
  if (bound.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (bound.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return -1;
}

MHD_Result Answer(MHD_Connection* connection, unsigned int status, absl::string_view body,
                  const char* content_type, bool allow = false) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

void Log(void* /*unused*/, const char* format, va_list arguments) {
  char line[512];
  std::vsnprintf(line, sizeof(line), format, arguments);
  std::string_view text(line);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  spdlog::debug("HTTP listener: {}", text);
}

}  // namespace

// Answers libmicrohttpd's requests, and keeps the whole-request deadline,
// which libmicrohttpd has not (its timeout is per read): each connection's
// socket and when its next request's head became due; a thread shuts down
// the sockets of heads overdue, which libmicrohttpd then closes.
// libmicrohttpd reports a connection closed before it closes the socket,
// and both sides hold `mu_`, so a socket shut down here is always the
// connection's own.
class MetricsHttpServer::Listener {
 public:
  explicit Listener(const Options& options)
      : options_(options),
        deadline_(options.limits.request_deadline),
        sweeper_([this] { Sweep(); }) {}
  ~Listener() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    sweeper_.join();
  }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  static MHD_Result Serve(void* self, MHD_Connection* connection, const char* url,
                          const char* method, const char* version, const char* upload_data,
                          size_t* upload_data_size, void** request);
  static void OnConnection(void* self, MHD_Connection* connection, void** /*socket_context*/,
                           MHD_ConnectionNotificationCode code) {
    static_cast<Listener*>(self)->Notify(connection, code);
  }
  static void OnRequestDone(void* self, MHD_Connection* connection, void** /*request*/,
                            MHD_RequestTerminationCode /*why*/) {
    static_cast<Listener*>(self)->Due(connection, absl::Now());
  }

 private:
  struct Pending {
    int fd = -1;
    absl::Time due_since;  // InfiniteFuture while a request is being answered
  };

  void Notify(MHD_Connection* connection, MHD_ConnectionNotificationCode code) {
    std::lock_guard<std::mutex> lock(mu_);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      connections_.erase(connection);
      return;
    }
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info != nullptr) connections_[connection] = Pending{info->connect_fd, absl::Now()};
  }

  void Due(MHD_Connection* connection, absl::Time since) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(connection);
    if (it != connections_.end()) it->second.due_since = since;
  }

  void Sweep() {
    const absl::Duration period = std::max(deadline_ / 10, absl::Milliseconds(10));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      wake_.wait_for(lock, absl::ToChronoNanoseconds(period));
      const absl::Time now = absl::Now();
      for (auto& [connection, pending] : connections_) {
        if (now - pending.due_since < deadline_) continue;
        shutdown(pending.fd, SHUT_RDWR);
        pending.due_since = absl::InfiniteFuture();  // once is enough
      }
    }
  }

  const Options& options_;
  const absl::Duration deadline_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  absl::flat_hash_map<MHD_Connection*, Pending> connections_;
  std::thread sweeper_;
};

MetricsHttpServer::MetricsHttpServer(Options options)
    : options_(std::move(options)), listener_(std::make_unique<Listener>(options_)) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(Options options) {
  absl::StatusOr<HostPort> address = ParseHostPort("--metrics-listen", options.address);
  if (!address.ok()) return address.status();
  absl::StatusOr<UniqueFd> socket = Listen(options.address, *address);
  if (!socket.ok()) return socket.status();
  std::unique_ptr<MetricsHttpServer> self(new MetricsHttpServer(std::move(options)));
  self->port_ = BoundPort(socket->get());
  const Limits& limits = self->options_.limits;
  const unsigned int idle_seconds =
      static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(limits.idle_timeout)));
  const int listen_fd = socket->get();
  self->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, nullptr, nullptr,
      &Listener::Serve, self->listener_.get(), MHD_OPTION_EXTERNAL_LOGGER, &Log, nullptr,
      MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_THREAD_POOL_SIZE,
      std::max(1u, limits.threads), MHD_OPTION_CONNECTION_LIMIT, limits.max_connections,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.max_connections_per_address,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, limits.max_request_head_bytes,
      MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds, MHD_OPTION_NOTIFY_CONNECTION,
      &Listener::OnConnection, self->listener_.get(), MHD_OPTION_NOTIFY_COMPLETED,
      &Listener::OnRequestDone, self->listener_.get(), MHD_OPTION_END);
  if (self->daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on --metrics-listen ",
                                               self->options_.address,
                                               ": libmicrohttpd did not start"));
  }
  socket->Release();  // the daemon closes it at MHD_stop_daemon
  return self;
}

MHD_Result MetricsHttpServer::Listener::Serve(void* self_pointer, MHD_Connection* connection,
                                              const char* url, const char* method,
                                              const char* /*version*/, const char* /*upload_data*/,
                                              size_t* upload_data_size, void** request) {
  Listener& self = *static_cast<Listener*>(self_pointer);
  if (*request == nullptr) {
    // The head has arrived: its deadline is met.
    self.Due(connection, absl::InfiniteFuture());
    *request = &self;  // a request is under way
  }
  const absl::string_view verb(method);
  if (verb != MHD_HTTP_METHOD_GET && verb != MHD_HTTP_METHOD_HEAD) {
    *upload_data_size = 0;  // the body is not read
    if (!IsToken(verb)) {
      return Answer(connection, MHD_HTTP_BAD_REQUEST, "a method must be an HTTP token\n",
                    kTextType);
    }
    return Answer(
        connection, MHD_HTTP_METHOD_NOT_ALLOWED,
        absl::StrCat("method ", verb, " is not allowed: ", kPaths, " take GET (or HEAD)\n"),
        kTextType, /*allow=*/true);
  }
  const Options& o = self.options_;
  const absl::string_view path(url);
  if (path == "/metrics") return Answer(connection, MHD_HTTP_OK, o.metrics(), kMetricsType);
  if (path == "/healthz") {
    const absl::Status live = o.live ? o.live() : absl::OkStatus();
    if (live.ok()) return Answer(connection, MHD_HTTP_OK, "ok\n", kTextType);
    return Answer(connection, MHD_HTTP_SERVICE_UNAVAILABLE,
                  absl::StrCat("not live: ", live.message(), "\n"), kTextType);
  }
  if (path == "/readyz") {
    const absl::Status ready = o.ready();
    if (ready.ok()) return Answer(connection, MHD_HTTP_OK, "ok\n", kTextType);
    return Answer(connection, MHD_HTTP_SERVICE_UNAVAILABLE,
                  absl::StrCat("not ready: ", ready.message(), "\n"), kTextType);
  }
  return Answer(connection, MHD_HTTP_NOT_FOUND,
                absl::StrCat("no page at ", path, ": gpumuxd serves ", kPaths, "\n"), kTextType);
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (daemon_ == nullptr) return;
  MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

}  // namespace gpumux
