#pragma once

// MetricsHttpServer: gpumuxd's HTTP listener (--metrics-listen), served by
// cpp-httplib: GET /metrics (Prometheus's text format), /healthz (200 while
// the daemon runs) and /readyz (200 when every device is healthy and the
// gRPC server serves, 503 with the reason otherwise). HEAD works as GET.
// Any other method is 405 with Allow: GET, HEAD; any other path 404; a
// header line over 8 KiB or a request URI over 8 KiB 400 or 414 (cpp-httplib's
// limits); GET and HEAD bodies are never read. A few threads serve it, apart from the
// gRPC servers', and each connection may idle or stall for 2 s at most, so
// no HTTP client holds up anything else for long.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace gpumux {

class MetricsHttpServer {
 public:
  struct Options {
    // HOST:PORT (IPv6 as "[ADDR]:PORT"); port 0 picks a free port.
    std::string address;
    // The /metrics page, built at each scrape.
    std::function<std::string()> metrics;
    // OK when ready; otherwise /readyz answers 503 with the message.
    std::function<absl::Status()> ready;
  };

  // INVALID_ARGUMENT for a bad address, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(Options options);
  // Stop().
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Stops accepting and waits for the requests under way. Idempotent.
  void Stop();
  int port() const { return port_; }

 private:
  explicit MetricsHttpServer(Options options);

  const Options options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace gpumux
