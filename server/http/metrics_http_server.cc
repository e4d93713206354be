#include "server/http/metrics_http_server.h"

#include <netdb.h>
#include <netinet/in.h>
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
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/net/host_port.h"
#include "gpumux/common/unique_fd.h"
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

// Answers libmicrohttpd's requests and keeps what libmicrohttpd 0.9.75
// (Debian 12's) does not keep well: the connection caps (each thread of its
// pool has a share of its limit, so one full thread refuses while the
// others have room) and the deadlines (its own timeout is per read, and
// under load at times closes every connection at once). Each connection's socket,
// its peer's address and when it is overdue are kept here; a connection
// over a cap is shut down as it starts, and a thread shuts down the
// sockets of the overdue; libmicrohttpd then closes them. It reports a
// connection closed before it closes the socket, and both sides hold
// `mu_`, so a socket shut down here is always the connection's own.
class MetricsHttpServer::Listener {
 public:
  explicit Listener(const Options& options)
      : options_(options), limits_(options.limits), sweeper_([this] { Sweep(); }) {}
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
    Listener& listener = *static_cast<Listener*>(self);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      listener.Started(connection);
    } else {
      listener.Closed(connection);
    }
  }
  static void OnRequestDone(void* self, MHD_Connection* connection, void** /*request*/,
                            MHD_RequestTerminationCode /*why*/) {
    Listener& listener = *static_cast<Listener*>(self);
    listener.Due(connection, absl::Now() + listener.limits_.request_deadline);
  }

 private:
  struct Connection {
    int fd = -1;
    std::string address;  // empty when it was refused, and not counted
    absl::Time due;       // shut down when this passes
  };

  // The peer's address as the caps count it: its family and bytes, an
  // IPv4-mapped IPv6 address as IPv4.
  static std::string AddressKey(const sockaddr* peer) {
    if (peer == nullptr) return "?";
    if (peer->sa_family == AF_INET6) {
      const in6_addr& address = reinterpret_cast<const sockaddr_in6*>(peer)->sin6_addr;
      if (IN6_IS_ADDR_V4MAPPED(&address)) {
        return absl::StrCat("4",
                            absl::string_view(reinterpret_cast<const char*>(&address) + 12, 4));
      }
      return absl::StrCat("6", absl::string_view(reinterpret_cast<const char*>(&address), 16));
    }
    if (peer->sa_family == AF_INET) {
      const in_addr& address = reinterpret_cast<const sockaddr_in*>(peer)->sin_addr;
      return absl::StrCat("4", absl::string_view(reinterpret_cast<const char*>(&address), 4));
    }
    return absl::StrCat("family ", peer->sa_family);
  }

  void Started(MHD_Connection* connection) {
    // libmicrohttpd answers these in one buffer per connection: copy each.
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == nullptr) return;
    const int fd = info->connect_fd;
    info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    std::string address = AddressKey(info == nullptr ? nullptr : info->client_addr);
    std::lock_guard<std::mutex> lock(mu_);
    unsigned int& from_address = per_address_[address];
    if (counted_ >= limits_.max_connections ||
        from_address >= limits_.max_connections_per_address) {
      if (from_address == 0) per_address_.erase(address);
      spdlog::debug("HTTP listener: {} connections open ({} from this address): closing one more",
                    counted_, from_address);
      shutdown(fd, SHUT_RDWR);
      connections_[connection] = Connection{fd, "", absl::InfiniteFuture()};
      return;
    }
    ++from_address;
    ++counted_;
    connections_[connection] =
        Connection{fd, std::move(address), absl::Now() + limits_.request_deadline};
  }

  void Closed(MHD_Connection* connection) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(connection);
    if (it == connections_.end()) return;
    if (!it->second.address.empty()) {
      auto from = per_address_.find(it->second.address);
      if (--from->second == 0) per_address_.erase(from);
      --counted_;
    }
    connections_.erase(it);
  }

  void Due(MHD_Connection* connection, absl::Time due) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(connection);
    if (it != connections_.end() && !it->second.address.empty()) it->second.due = due;
  }

  void Sweep() {
    const absl::Duration period = std::max(
        std::min(limits_.request_deadline, limits_.answer_deadline) / 10, absl::Milliseconds(10));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      wake_.wait_for(lock, absl::ToChronoNanoseconds(period));
      const absl::Time now = absl::Now();
      for (auto& [connection, open] : connections_) {
        if (now < open.due) continue;
        shutdown(open.fd, SHUT_RDWR);
        open.due = absl::InfiniteFuture();  // once is enough
      }
    }
  }

  const Options& options_;
  const Limits& limits_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  absl::flat_hash_map<MHD_Connection*, Connection> connections_;
  // The counted (not refused) connections, in all and per address.
  unsigned int counted_ = 0;
  absl::flat_hash_map<std::string, unsigned int> per_address_;
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
  const unsigned int threads = std::max(1u, limits.threads);
  const int listen_fd = socket->get();
  // libmicrohttpd splits its connection limit evenly between its threads,
  // and a thread at its limit refuses and stops keeping connections alive.
  // The caps are the Listener's: each thread has room for all it allows
  // and for as many refused ones closing.
  self->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, nullptr, nullptr,
      &Listener::Serve, self->listener_.get(), MHD_OPTION_EXTERNAL_LOGGER, &Log, nullptr,
      MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_THREAD_POOL_SIZE, threads,
      MHD_OPTION_CONNECTION_LIMIT, 2 * limits.max_connections * threads,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, limits.max_request_head_bytes,
      MHD_OPTION_NOTIFY_CONNECTION, &Listener::OnConnection, self->listener_.get(),
      MHD_OPTION_NOTIFY_COMPLETED, &Listener::OnRequestDone, self->listener_.get(), MHD_OPTION_END);
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
  const absl::string_view verb(method);
  const bool get = verb == MHD_HTTP_METHOD_GET || verb == MHD_HTTP_METHOD_HEAD;
  if (*request == nullptr) {
    // The head has arrived: its deadline is met, the answer's begins.
    self.Due(connection, absl::Now() + self.limits_.answer_deadline);
    *request = &self;  // a request is under way
    // A GET answered at its head's first call would close the connection
    // (libmicrohttpd cannot know yet that no body follows); at the next
    // call it stays open for the next request.
    if (get) return MHD_YES;
  }
  if (get && *upload_data_size != 0) {
    *upload_data_size = 0;  // a body is dropped; the answer follows it
    return MHD_YES;
  }
  if (!get) {
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
