#include "server/http/metrics_http_server.h"

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr const char* kPaths = "/metrics, /healthz and /readyz";
// Prometheus's text format, version 0.0.4.
constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextType = "text/plain; charset=utf-8";
// Threads serving HTTP: a scraper or two, probes, and an operator's curl.
constexpr size_t kThreads = 8;

}  // namespace

MetricsHttpServer::MetricsHttpServer(Options options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(Options options) {
  absl::StatusOr<HostPort> address = ParseHostPort("--metrics-listen", options.address);
  if (!address.ok()) return address.status();
  std::unique_ptr<MetricsHttpServer> self(new MetricsHttpServer(std::move(options)));
  httplib::Server& server = *self->server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  // A client that stalls, or sends nothing after an error reply, holds a
  // thread for 2 s at most; a scraper reconnects between scrapes.
  server.set_read_timeout(2, 0);
  server.set_write_timeout(2, 0);
  server.set_idle_interval(0, 100000);
  server.set_keep_alive_timeout(2);
  server.set_keep_alive_max_count(100);
  server.set_pre_routing_handler([](const httplib::Request& request, httplib::Response& response) {
    if (request.method == "GET" || request.method == "HEAD") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    response.status = 405;
    response.set_header("Allow", "GET, HEAD");
    response.set_content(absl::StrCat("method ", request.method, " is not allowed: ", kPaths,
                                      " take GET (or HEAD)\n"),
                         kTextType);
    return httplib::Server::HandlerResponse::Handled;
  });
  server.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    if (response.status == 404) {
      response.set_content(
          absl::StrCat("no page at ", request.path, ": gpumuxd serves ", kPaths, "\n"), kTextType);
    } else {
      response.set_content(absl::StrCat("HTTP ", response.status, "\n"), kTextType);
    }
  });
  const Options& o = self->options_;
  server.Get("/metrics", [&o](const httplib::Request&, httplib::Response& response) {
    response.set_content(o.metrics(), kMetricsType);
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", kTextType);
  });
  server.Get("/readyz", [&o](const httplib::Request&, httplib::Response& response) {
    const absl::Status ready = o.ready();
    if (ready.ok()) {
      response.set_content("ok\n", kTextType);
      return;
    }
    response.status = 503;
    response.set_content(absl::StrCat("not ready: ", ready.message(), "\n"), kTextType);
  });

  if (address->port == 0) {
    self->port_ = server.bind_to_any_port(address->host);
  } else if (server.bind_to_port(address->host, address->port)) {
    self->port_ = address->port;
  } else {
    self->port_ = -1;
  }
  if (self->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on --metrics-listen ",
                                               self->options_.address,
                                               ": the address is in use or not this machine's"));
  }
  auto ended = std::make_shared<std::atomic<bool>>(false);
  self->thread_ = std::thread([&server, ended] {
    server.listen_after_bind();
    ended->store(true);
  });
  // stop() ends only a loop that runs: wait until it does (or ended at once).
  while (!server.is_running() && !ended->load()) std::this_thread::yield();
  return self;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace gpumux
