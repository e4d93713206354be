#include "server/rpc/call_metrics.h"

#include <chrono>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace gpumux {
namespace {

constexpr absl::string_view kCodeNames[CallMetrics::kStatusCodes] = {
    "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated"};

absl::string_view TypeOf(bool client_streaming, bool server_streaming) {
  if (client_streaming && server_streaming) return "bidi_stream";
  if (client_streaming) return "client_stream";
  if (server_streaming) return "server_stream";
  return "unary";
}

// gRPC's health service is not built from generated protobuf code, so the
// pool does not know it.
struct FixedMethod {
  const char* name;
  bool server_streaming;
};
constexpr FixedMethod kHealthMethods[] = {{"Check", false}, {"Watch", true}};
constexpr absl::string_view kHealthService = "grpc.health.v1.Health";

class CallMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  CallMetricsInterceptor(CallMetrics* metrics, CallMetrics::Method* method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {
    method_->started.fetch_add(1, std::memory_order_relaxed);
  }
  ~CallMetricsInterceptor() override {
    if (!recorded_) Record(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // Run after the parse-failure interceptor, so the code is the one sent.
    if (!recorded_ && methods->QueryInterceptionHookPoint(
                          grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    recorded_ = true;
    metrics_->Handled(method_, static_cast<int>(code),
                      absl::FromChrono(std::chrono::steady_clock::now() - start_));
  }

  CallMetrics* const metrics_;
  CallMetrics::Method* const method_;
  const std::chrono::steady_clock::time_point start_;
  bool recorded_ = false;  // one interceptor per call, run in the call's order
};

}  // namespace

CallMetrics::CallMetrics(const std::vector<std::string>& services) {
  auto add = [this](absl::string_view service, absl::string_view name, absl::string_view type) {
    auto method = std::make_unique<Method>();
    method->service = std::string(service);
    method->name = std::string(name);
    method->type = type;
    by_path_.emplace(absl::StrCat("/", service, "/", name), method.get());
    methods_.push_back(std::move(method));
  };
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& service_name : services) {
    if (service_name == kHealthService) {
      for (const FixedMethod& m : kHealthMethods)
        add(kHealthService, m.name, TypeOf(false, m.server_streaming));
      continue;
    }
    const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(service_name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = service->method(i);
      add(service_name, m->name(), TypeOf(m->client_streaming(), m->server_streaming()));
    }
  }
  auto unknown = std::make_unique<Method>();
  unknown->service = "unknown";
  unknown->name = "unknown";
  unknown->type = "unknown";
  unknown_ = unknown.get();
  methods_.push_back(std::move(unknown));
}

CallMetrics::Method* CallMetrics::Find(absl::string_view path) {
  auto it = by_path_.find(path);
  return it == by_path_.end() ? unknown_ : it->second;
}

void CallMetrics::Handled(Method* method, int status_code, absl::Duration elapsed) {
  if (status_code < 0 || status_code >= kStatusCodes) status_code = 2;  // UNKNOWN
  method->handled[static_cast<size_t>(status_code)].fetch_add(1, std::memory_order_relaxed);
  const double seconds = absl::ToDoubleSeconds(elapsed);
  size_t bucket = 0;
  while (bucket < kBucketBounds.size() && seconds > kBucketBounds[bucket]) ++bucket;
  method->buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  method->handling_nanos.fetch_add(static_cast<uint64_t>(absl::ToInt64Nanoseconds(elapsed)),
                                   std::memory_order_relaxed);
}

void CallMetrics::AppendTo(PrometheusText& text) const {
  auto labels = [](const Method& m) {
    return std::vector<PrometheusText::Label>{
        {"grpc_type", m.type}, {"grpc_service", m.service}, {"grpc_method", m.name}};
  };
  text.Family("grpc_server_started_total", PrometheusText::Type::kCounter,
              "Total number of RPCs started on the server.");
  for (const auto& m : methods_) {
    if (m.get() == unknown_ && m->started.load(std::memory_order_relaxed) == 0) continue;
    text.Sample("grpc_server_started_total", labels(*m),
                m->started.load(std::memory_order_relaxed));
  }
  text.Family("grpc_server_handled_total", PrometheusText::Type::kCounter,
              "Total number of RPCs completed on the server, regardless of success or failure.");
  for (const auto& m : methods_) {
    for (int code = 0; code < kStatusCodes; ++code) {
      const uint64_t count = m->handled[static_cast<size_t>(code)].load(std::memory_order_relaxed);
      if (count == 0) continue;
      std::vector<PrometheusText::Label> with_code = labels(*m);
      with_code.emplace_back("grpc_code", kCodeNames[code]);
      text.Sample("grpc_server_handled_total", with_code, count);
    }
  }
  text.Family("grpc_server_handling_seconds", PrometheusText::Type::kHistogram,
              "Histogram of response latency (seconds) of gRPC that had been application-level "
              "handled by the server.");
  // Only methods called so far: 18 series each.
  for (const auto& m : methods_) {
    if (m->started.load(std::memory_order_relaxed) == 0) continue;
    std::vector<PrometheusText::Label> with_le = labels(*m);
    with_le.emplace_back("le", "");
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kBucketBounds.size(); ++b) {
      cumulative += m->buckets[b].load(std::memory_order_relaxed);
      const std::string bound =
          b < kBucketBounds.size() ? FormatPrometheusFloat(kBucketBounds[b]) : "+Inf";
      with_le.back().second = bound;
      text.Sample("grpc_server_handling_seconds_bucket", with_le, cumulative);
    }
    text.Sample("grpc_server_handling_seconds_sum", labels(*m),
                static_cast<double>(m->handling_nanos.load(std::memory_order_relaxed)) * 1e-9);
    text.Sample("grpc_server_handling_seconds_count", labels(*m), cumulative);
  }
}

grpc::experimental::Interceptor* CallMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new CallMetricsInterceptor(metrics_, metrics_->Find(info->method()));
}

}  // namespace gpumux
