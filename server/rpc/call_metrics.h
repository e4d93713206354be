#pragma once

// CallMetrics: per-method books of the gRPC calls the daemon handled, with
// go-grpc-prometheus's names and labels: grpc_server_started_total,
// grpc_server_handled_total (by status code) and the latency histogram
// grpc_server_handling_seconds, each labelled grpc_type, grpc_service and
// grpc_method. CallMetricsInterceptorFactory records every call of a server
// it is installed on.
//
// The methods are fixed when the books are made (the services' descriptors):
// a call to any other name, which the daemon refuses anyway, counts under
// grpc_service="unknown", so a client cannot add series. Recording is
// lock-free (relaxed atomics: each figure is a counter on its own, and a
// scrape may see a call counted as started and not yet handled). Thread-safe.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/formats/prometheus_text.h"
#include "grpcpp/support/server_interceptor.h"

namespace gpumux {

class CallMetrics {
 public:
  // Upper bounds of the latency buckets, in seconds: 50 µs to 10 s, for
  // calls from a cached lookup to a synchronize behind long kernels.
  static constexpr std::array<double, 16> kBucketBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   10};
  static constexpr int kStatusCodes = 17;  // OK .. UNAUTHENTICATED

  struct Method {
    std::string service;     // "gpumux.v1.Memory"
    std::string name;        // "Allocate"
    absl::string_view type;  // "unary", "client_stream", "server_stream", "bidi_stream"
    std::atomic<uint64_t> started{0};
    std::array<std::atomic<uint64_t>, kStatusCodes> handled{};
    std::array<std::atomic<uint64_t>, kBucketBounds.size() + 1> buckets{};  // last: +Inf
    std::atomic<uint64_t> handling_nanos{0};
  };

  // Books for every method of the services named (full names, e.g.
  // "gpumux.v1.Memory", "grpc.health.v1.Health"), as the protobuf generated
  // pool describes them; a name it does not know is skipped.
  explicit CallMetrics(const std::vector<std::string>& services);

  // The books of "/package.Service/Method"; the "unknown" books for a path
  // not among them. Never null.
  Method* Find(absl::string_view path);
  void Handled(Method* method, int status_code, absl::Duration elapsed);

  // Appends the three families: every method's started count (0 until
  // called), and for those called, their histogram and handled count for
  // each code they answered.
  void AppendTo(PrometheusText& text) const;

 private:
  std::vector<std::unique_ptr<Method>> methods_;
  absl::flat_hash_map<std::string, Method*> by_path_;  // fixed after construction
  Method* unknown_ = nullptr;
};

// Installs CallMetrics on a server: one interceptor per call, which counts it
// as started when it begins and as handled with the status it sends, or
// CANCELLED when it ends without one. `metrics` must outlive the server.
class CallMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CallMetricsInterceptorFactory(CallMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  CallMetrics* metrics_;
};

}  // namespace gpumux
