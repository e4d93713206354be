#pragma once

// MetricsHttpServer: gpumuxd's HTTP listener (--metrics-listen), served by
// libmicrohttpd: GET /metrics (Prometheus's text format), /healthz (200
// while the daemon runs and its listeners accept, 503 with the reason
// otherwise) and /readyz (200 when besides every device is healthy, 503 with
// the reason otherwise). HEAD works as GET. Any other method is 405 with Allow: GET,
// HEAD (400 for a method that is not an HTTP token); any other path 404;
// Range is ignored (the whole page, 200).
//
// An unauthenticated port must not be able to hurt the daemon, so every
// request is bounded (Limits): its head (request line and headers, bytes
// and therefore lines) by the connection's memory, answered 431 or 414
// beyond it; its head must arrive within a deadline from the connection's
// start or its previous answer (so an idle connection closes too), and its
// answer must be sent within another, or the connection is closed;
// connections are capped, per peer address and in all. Connections wait on
// epoll, not on threads, so slow clients do not hold up the probes
// (Kubernetes gives them 1 s).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct MHD_Daemon;

namespace gpumux {

class MetricsHttpServer {
 public:
  struct Limits {
    // Connections open at once, in all and from one peer address (more are
    // closed at once, unanswered). An IPv4-mapped IPv6 address counts as
    // its IPv4 address.
    unsigned int max_connections = 512;
    unsigned int max_connections_per_address = 128;
    // The memory a connection may use for its request's head: request
    // line and headers, their lines included (libmicrohttpd's connection
    // memory limit).
    size_t max_request_head_bytes = 32 << 10;
    // From a connection's start, or its previous answer, to its next
    // request's complete head.
    absl::Duration request_deadline = absl::Seconds(5);
    // From a request's complete head to its answer's last byte sent: a
    // reader too slow for it is cut off (Prometheus gives a scrape 10 s).
    absl::Duration answer_deadline = absl::Seconds(10);
    // Threads that read requests and build the pages.
    unsigned int threads = 4;
  };
  struct Options {
    // HOST:PORT (IPv6 as "[ADDR]:PORT"); port 0 picks a free port.
    std::string address;
    // The /metrics page, built at each scrape.
    std::function<std::string()> metrics;
    // OK when ready; otherwise /readyz answers 503 with the message.
    std::function<absl::Status()> ready;
    // OK while alive (unset: always); otherwise /healthz answers 503 with
    // the message.
    std::function<absl::Status()> live;
    Limits limits;
  };

  // INVALID_ARGUMENT for a bad address, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(Options options);
  // Stop().
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Stops accepting, closes the connections and waits for the pages under
  // way. Idempotent.
  void Stop();
  int port() const { return port_; }

 private:
  // Answers the requests and keeps their deadlines (metrics_http_server.cc).
  class Listener;

  explicit MetricsHttpServer(Options options);

  const Options options_;
  std::unique_ptr<Listener> listener_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace gpumux
