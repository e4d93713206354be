#include "server/daemon.h"

#include <grp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "allocator/allocator_config.h"
#include "common/base/byte_size.h"
#include "common/base/status_macros.h"
#include "common/net/host_port.h"
#include "gpumux/common/sealed_memory.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/backend/host/host_backend.h"
#ifdef GPUMUX_HAVE_CUDA
#include "server/backend/cuda/cuda_backend.h"
#include "server/backend/cuda/nvtx3_sink.h"
#endif
#include "common/base/logging.h"
#include "common/ipc/memory_socket.h"
#include "common/net/admin_socket.h"
#include "server/core/client_queries.h"
#include "server/core/comm_work.h"
#include "server/core/device_profiler.h"
#include "server/core/device_work.h"
#include "server/core/group_device.h"
#include "server/core/group_registry.h"
#include "server/core/group_work.h"
#include "server/core/memory_manager.h"
#include "server/core/nvtx_ranges.h"
#include "server/core/pressure_relief.h"
#include "server/core/rendezvous_store.h"
#include "server/core/rng_generators.h"
#include "server/core/session_lifecycle.h"
#include "server/core/session_registry.h"
#include "server/core/staging_buffers.h"
#include "server/core/stream_manager.h"
#include "server/group/gloo_transport.h"
#include "server/http/metrics_http_server.h"
#include "server/http/metrics_page.h"
#include "server/rpc/admin_service.h"
#include "server/rpc/admin_socket_server.h"
#include "server/rpc/blocking_executor.h"
#include "server/rpc/call_metrics.h"
#include "server/rpc/comm_service.h"
#include "server/rpc/copy_service.h"
#include "server/rpc/device_service.h"
#include "server/rpc/event_service.h"
#include "server/rpc/group_service.h"
#include "server/rpc/memory_service.h"
#include "server/rpc/memory_socket_server.h"
#include "server/rpc/nvtx_service.h"
#include "server/rpc/observe_service.h"
#include "server/rpc/parse_failure_interceptor.h"
#include "server/rpc/peer_channels.h"
#include "server/rpc/profile_service.h"
#include "server/rpc/random_service.h"
#include "server/rpc/session_service.h"
#include "server/rpc/stream_service.h"
#include "server/rpc/tcp_credentials.h"
#include "server/rpc/tcp_deny_service.h"
#include "server/rpc/unserved_method_service.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr const char* kServiceNames[] = {
    "gpumux.v1.Session", "gpumux.v1.Device", "gpumux.v1.Memory", "gpumux.v1.Observe",
    "gpumux.v1.Stream",  "gpumux.v1.Event",  "gpumux.v1.Copy",   "gpumux.v1.Random",
    "gpumux.v1.Nvtx",    "gpumux.v1.Comm",   "gpumux.v1.Group"};
constexpr const char* kTcpServiceNames[] = {"gpumux.v1.Device", "gpumux.v1.Observe"};

// Inline copies carry up to DeviceWork::kMaxInlineBytes; the rest of a
// message is small.
constexpr int kMaxMessageBytes =
    static_cast<int>(DeviceWork::kMaxInlineBytes + (uint64_t{1} << 20));

// gRPC refuses a call whose metadata passes its limit (8 KiB by default) by
// dropping the whole connection, which ends every session of the process on
// it as crashed. Under this larger one such a call reaches the services,
// which refuse it alone (a gpumux-session value is 53 bytes at most).
void LimitCallMetadata(grpc::ServerBuilder& builder) {
  constexpr int kMaxMetadataBytes = 256 << 10;
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
}

// Why `backend` has no expandable segments (only a CUDA backend can say).
std::string ExpandableSegmentsUnavailable([[maybe_unused]] const DeviceBackend& backend) {
#ifdef GPUMUX_HAVE_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(&backend); cuda != nullptr) {
    return std::string(cuda->expandable_segments_status().message());
  }
#endif
  return "it has none";
}

// `expandable_segments`: the allocator runs them (--allocator-conf); only
// the CUDA backend needs to know.
absl::StatusOr<std::unique_ptr<DeviceBackend>> MakeBackend(
    const Daemon::Options& options, [[maybe_unused]] bool expandable_segments,
    MemoryFileTable* memory_files) {
  if (options.backend != "auto" && options.backend != "host" && options.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", options.backend, "': use auto, host or cuda"));
  }
  if (options.nccl.empty()) {
    return absl::InvalidArgumentError("--nccl is auto, off or the path of a libnccl.so, not empty");
  }
#ifdef GPUMUX_HAVE_CUDA
  if (options.backend == "cuda" ||
      (options.backend == "auto" && CudaBackend::VisibleDeviceCount() > 0)) {
    CudaBackend::Options cuda;
    cuda.nccl = options.nccl != "off";
    if (options.nccl != "auto" && options.nccl != "off") cuda.nccl_library = options.nccl;
    cuda.memory_files = memory_files;
    cuda.paged_segments = expandable_segments;
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(cuda);
    if (backend.ok()) {
      const CudaBackend& made = **backend;
      if (made.nccl_status().ok()) {
        spdlog::info("collectives across devices run on {}", made.collectives_description());
      } else if (!cuda.nccl_library.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--nccl=", options.nccl, ": ", made.nccl_status().message()));
      } else {
        spdlog::info("collectives across devices use peer copies and the reduction kernel: {}",
                     std::string(made.nccl_status().message()));
      }
      return std::unique_ptr<DeviceBackend>(*std::move(backend));
    }
    if (options.backend == "cuda") {
      return absl::FailedPreconditionError(
          absl::StrCat("--backend=cuda: ", backend.status().message()));
    }
    spdlog::warn("CUDA devices are visible but unusable ({}); using the host backend",
                 std::string(backend.status().message()));
  }
#else
  if (options.backend == "cuda") {
    return absl::FailedPreconditionError(
        "the CUDA backend is not part of this build of gpumuxd (built without the CUDA toolkit); "
        "use --backend=host or auto");
  }
#endif
  HostBackend::Options host;
  host.device_count = options.host_devices;
  host.device_memory = options.host_device_memory;
  host.stream_workers = options.host_stream_workers;
  host.memory_files = memory_files;
  GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<HostBackend> backend, HostBackend::Create(host));
  return std::unique_ptr<DeviceBackend>(std::move(backend));
}

// Options::group_host, defaulted.
std::string GroupHost(const Daemon::Options& options) {
  if (!options.group_host.empty()) return options.group_host;
  if (!options.listen_address.empty()) {
    absl::StatusOr<HostPort> listen = ParseHostPort("--listen", options.listen_address);
    if (listen.ok() && !listen->host.empty() && listen->host != "0.0.0.0" && listen->host != "::") {
      return listen->host;
    }
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return name;
  return "127.0.0.1";
}

// "host:port", or "[host]:port" for an IPv6 address.
std::string JoinHostPort(const std::string& host, int port) {
  return host.find(':') == std::string::npos ? absl::StrCat(host, ":", port)
                                             : absl::StrCat("[", host, "]:", port);
}

// True when something accepts connections on the Unix socket at `path`.
bool SocketIsLive(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

// The TCP listener's credentials (MakeTcpServerCredentials); null without a
// listener, where the TCP flags are refused.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(
    const Daemon::Options& options) {
  const TcpSecurityOptions security{.mode = options.tcp_mode,
                                    .tls_cert_file = options.tls_cert_file,
                                    .tls_key_file = options.tls_key_file,
                                    .tls_client_ca_file = options.tls_client_ca_file,
                                    .auth_token_file = options.auth_token_file};
  if (options.listen_address.empty()) {
    if (security.mode != "observe" || !security.tls_cert_file.empty() ||
        !security.tls_key_file.empty() || !security.tls_client_ca_file.empty() ||
        !security.auth_token_file.empty()) {
      return absl::InvalidArgumentError(
          "--tcp-mode, --tls-cert, --tls-key, --tls-client-ca and --auth-token-file configure "
          "the TCP listener: give --listen too");
    }
    return std::shared_ptr<grpc::ServerCredentials>();
  }
  return MakeTcpServerCredentials(security);
}

absl::StatusOr<gid_t> LookUpGroup(const std::string& name) {
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  const int error = getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket-group '", name, "': no such group",
                     error != 0 ? absl::StrCat(" (", std::strerror(error), ")") : ""));
  }
  return found->gr_gid;
}

// The parse-failure interceptor first: it rewrites the status the call
// metrics then count.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> Interceptors(
    CallMetrics* metrics) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<ParseFailureInterceptorFactory>());
  creators.push_back(std::make_unique<CallMetricsInterceptorFactory>(metrics));
  return creators;
}

// Every service whose calls /metrics counts.
// The services of `names`, then gRPC's health and reflection, which every
// server has.
std::vector<std::string> WithGrpcServices(std::vector<std::string> names) {
  names.push_back("grpc.health.v1.Health");
  names.push_back("grpc.reflection.v1alpha.ServerReflection");
  return names;
}

constexpr const char* kRendezvousWhere =
    "the TCP listener in its full mode (gpumuxd --listen, --tcp-mode=full), where the daemons of "
    "a group meet";

// The main socket's answer to a call of no service of its own.
std::unique_ptr<UnservedMethodService> UnixUnserved() {
  std::vector<std::string> names(std::begin(kServiceNames), std::end(kServiceNames));
  names.push_back("gpumux.v1.Profile");
  return std::make_unique<UnservedMethodService>(
      "the Unix socket", WithGrpcServices(std::move(names)),
      absl::flat_hash_map<std::string, std::string>{{"gpumux.v1.Rendezvous", kRendezvousWhere}});
}

// The full TCP listener's.
std::unique_ptr<UnservedMethodService> TcpUnserved() {
  std::vector<std::string> names(std::begin(kServiceNames), std::end(kServiceNames));
  names.push_back("gpumux.v1.Rendezvous");
  return std::make_unique<UnservedMethodService>(
      "the TCP listener", WithGrpcServices(std::move(names)),
      absl::flat_hash_map<std::string, std::string>{
          {"gpumux.v1.Profile", "the daemon's Unix socket"}});
}

// The admin socket's (both of its servers).
std::unique_ptr<UnservedMethodService> AdminUnserved() {
  absl::flat_hash_map<std::string, std::string> elsewhere;
  for (const char* name : kServiceNames) elsewhere[name] = "the daemon's main Unix socket";
  elsewhere["gpumux.v1.Profile"] = "the daemon's main Unix socket";
  elsewhere["gpumux.v1.Rendezvous"] = kRendezvousWhere;
  return std::make_unique<UnservedMethodService>(
      "the admin socket", WithGrpcServices({"gpumux.v1.Admin"}), std::move(elsewhere));
}

std::vector<std::string> CountedServices() {
  std::vector<std::string> services(std::begin(kServiceNames), std::end(kServiceNames));
  services.push_back("gpumux.v1.Admin");
  services.push_back("gpumux.v1.Profile");
  services.push_back("grpc.health.v1.Health");
  services.push_back("grpc.reflection.v1alpha.ServerReflection");
  return services;
}

// Every segment, staging buffer and interprocess event of the host backend
// holds a descriptor: the soft limit goes up to the hard one. Memory files
// then get what it leaves after a quarter (2,048 at least) kept for
// connections and accepts: a client that has the daemon create files
// (20,000 interprocess events) is refused before the listeners run out of
// descriptors, which made gRPC's stop accepting for good. Returns the
// descriptors kept.
uint64_t BudgetDescriptors() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    const rlim_t was = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      spdlog::warn("cannot raise the descriptor limit from {}: {}", was, std::strerror(errno));
      limit.rlim_cur = was;
    }
  }
  const uint64_t have = limit.rlim_cur == RLIM_INFINITY
                            ? uint64_t{1} << 20
                            : std::max<uint64_t>(static_cast<uint64_t>(limit.rlim_cur), 256);
  const uint64_t kept = std::min(have / 2, std::max<uint64_t>(2048, have / 4));
  SetMemoryFileBudget(have - kept, absl::StrCat("gpumuxd's descriptor limit ", have, " less ", kept,
                                                " kept for connections"));
  spdlog::info("descriptors: {} for memory files, {} kept for connections", have - kept, kept);
  return kept;
}

absl::Status PrepareSocketPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the socket path must not be empty");
  // The memory socket's path is the longer one.
  static_assert(kMemorySocketSuffix.size() >= kAdminSocketSuffix.size());
  if (MemorySocketPath(path).size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path '", path, "' is longer than ",
                     sizeof(sockaddr_un{}.sun_path) - 1 - kMemorySocketSuffix.size(),
                     " bytes (its memory socket adds '", kMemorySocketSuffix, "')"));
  }
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create socket directory '", parent.string(), "': ", ec.message()));
  }
  if (std::filesystem::exists(path, ec)) {
    if (SocketIsLive(path)) {
      return absl::FailedPreconditionError(
          absl::StrCat("another daemon is serving ", path, "; stop it or pass another --socket"));
    }
    std::filesystem::remove(path, ec);  // stale socket from a daemon that died
  }
  // The live daemon's memory and admin sockets sit next to its gRPC one
  // (checked above); stale ones go too.
  std::filesystem::remove(MemorySocketPath(path), ec);
  std::filesystem::remove(AdminSocketPath(path), ec);
  return absl::OkStatus();
}

}  // namespace

struct Daemon::State {
  explicit State(const Options& o)
      : options(o), executor(/*max_running_per_key=*/64, o.blocking_threads) {}

  Options options;
  // Before everything that files memory in it.
  MemoryFileTable memory_files;
  std::unique_ptr<DeviceBackend> backend;
  SessionRegistry sessions;
  // Before the books that record into it; after the backend its events are of.
  std::unique_ptr<DeviceProfiler> profiler;
  std::unique_ptr<StreamManager> streams;
  std::unique_ptr<MemoryManager> memory;
  std::unique_ptr<StagingBuffers> staging;
  std::unique_ptr<RngGenerators> rng;
  // NVTX3 for a profiler attached to the daemon, in CUDA builds.
  std::unique_ptr<NvtxSink> nvtx_sink;
  std::unique_ptr<NvtxRanges> nvtx;
  std::unique_ptr<DeviceWork> work;
  std::unique_ptr<CommWork> comm;
  // Groups of daemons: rank 0's rendezvous, the way to the other daemons,
  // the Gloo connections, the groups and their collectives.
  RendezvousStore rendezvous;
  std::unique_ptr<PeerChannels> peers;
  std::unique_ptr<GlooTransports> gloo;
  std::unique_ptr<GroupRegistry> groups;
  std::unique_ptr<GroupWork> group_work;
  std::unique_ptr<SessionLifecycle> lifecycle;
  // The daemon's questions to local-allocating clients and their answers.
  std::unique_ptr<ClientQueries> queries;
  // Asks them for their cached leases when an allocation finds no memory.
  std::unique_ptr<PressureRelief> relief;
  // After the managers its tasks use, so it joins them first.
  BlockingExecutor executor;
  // The books of every server's calls; before the servers, which record in it.
  CallMetrics call_metrics{CountedServices()};
  // Services: one set per server (a service registers with one server only).
  std::unique_ptr<SessionService> session_service;
  std::unique_ptr<MemoryService> memory_service;
  std::unique_ptr<StreamService> stream_service;
  std::unique_ptr<EventService> event_service;
  std::unique_ptr<CopyService> copy_service;
  std::unique_ptr<CommService> comm_service;
  std::unique_ptr<GroupService> group_service;
  std::unique_ptr<RandomService> random_service;
  std::unique_ptr<NvtxService> nvtx_service;
  std::unique_ptr<ProfileService> profile_service;
  std::unique_ptr<DeviceService> device_service;
  std::unique_ptr<ObserveService> observe_service;
  // The TCP listener's own: Device and Observe, and in full mode all the
  // others but Admin, which is refused there.
  struct TcpServices {
    std::unique_ptr<DeviceService> device;
    std::unique_ptr<ObserveService> observe;
    std::unique_ptr<SessionService> session;
    std::unique_ptr<MemoryService> memory;
    std::unique_ptr<StreamService> stream;
    std::unique_ptr<EventService> event;
    std::unique_ptr<CopyService> copy;
    std::unique_ptr<CommService> comm;
    std::unique_ptr<GroupService> group;
    std::unique_ptr<RendezvousService> rendezvous;
    std::unique_ptr<RandomService> random;
    std::unique_ptr<NvtxService> nvtx;
    std::unique_ptr<AdminDenyService> admin_refusal;
  } tcp;
  // gpumux.v1.Admin: served to operators on the admin socket, refused to
  // other peers there and to everyone on the main Unix socket.
  std::unique_ptr<AdminService> admin_service;
  std::unique_ptr<AdminDenyService> admin_refusal;       // admin socket, other peers
  std::unique_ptr<AdminDenyService> unix_admin_refusal;  // main Unix socket
  std::unique_ptr<grpc::Server> admin_server;            // operators' connections
  std::unique_ptr<grpc::Server> admin_refusal_server;    // everyone else's
  TcpDenyService tcp_deny_service;
  // What each server answers a call of no service it has (one per server).
  std::unique_ptr<UnservedMethodService> unix_unserved = UnixUnserved();
  std::unique_ptr<UnservedMethodService> tcp_unserved = TcpUnserved();
  std::unique_ptr<UnservedMethodService> admin_unserved = AdminUnserved();
  std::unique_ptr<UnservedMethodService> admin_refusal_unserved = AdminUnserved();
  std::unique_ptr<grpc::Server> unix_server;
  std::unique_ptr<grpc::Server> tcp_server;
  int tcp_port = 0;
  // Uses the registry and the table; stopped by Shutdown, destroyed first.
  std::unique_ptr<MemorySocketServer> memory_socket;
  // Hands connections to the admin servers; stopped by Shutdown before them.
  std::unique_ptr<AdminSocketServer> admin_socket;
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  // Watches device health (a sticky CUDA error) once a second.
  std::thread health_watcher;
  // Probes the Unix socket's listener (WatchListener).
  std::thread listener_watcher;
  // Why the Unix socket's listener is deaf; OK while it accepts.
  absl::Status deaf_listener ABSL_GUARDED_BY(mu);
  // /metrics, /healthz, /readyz; stopped first, as its pages read the rest.
  std::unique_ptr<MetricsHttpServer> metrics_server;

  void WatchHealth();
  // gRPC's listener stops accepting for good once an accept failed for lack
  // of descriptors (grpc 1.51's tcp_server_posix): every few seconds a call
  // on a new connection of the Unix socket checks that it accepts. Two
  // failures in a row make the daemon not live (/healthz and /readyz 503,
  // the TCP listener's gRPC health NOT_SERVING), so that an orchestrator
  // restarts it; an answer makes it live again.
  void WatchListener();
  // /healthz: OK while the daemon runs and its Unix socket accepts.
  absl::Status Live();
  // /readyz: OK when live and every device is healthy.
  absl::Status Ready();
  // Start's steps, in order. The backend for options, and the stale socket
  // path cleared (PrepareSocketPath).
  absl::Status OpenBackend(const AllocatorOptions& allocator_options);
  // The books, the work and the groups over the backend.
  absl::Status BuildCore(const AllocatorOptions& allocator_options);
  // The gRPC services of the Unix socket and the admin socket over the core.
  void BuildServices();
  // The admin socket, the TCP listener, the Unix socket, the memory socket
  // and the metrics port, in this order. When one fails, the TCP and Unix
  // servers started before it are shut down; the rest ends with the state.
  absl::Status StartListeners(const std::optional<gid_t>& socket_gid,
                              std::shared_ptr<grpc::ServerCredentials> tcp_credentials,
                              uint64_t connection_descriptors);
  // The admin servers (which listen nowhere) and the admin socket that hands
  // them connections.
  absl::Status StartAdminSocket(const std::optional<gid_t>& socket_gid);
  // Builds and starts tcp_server on options.listen_address with `credentials`.
  absl::Status StartTcpServer(std::shared_ptr<grpc::ServerCredentials> credentials);
  // unix_server on options.socket_path, its group and mode 0660.
  absl::Status StartUnixServer(const std::optional<gid_t>& socket_gid);
  // /metrics, /healthz and /readyz on options.metrics_listen_address, where
  // one is set.
  absl::Status StartMetricsServer();
  // One line with where the daemon serves, one per device.
  void LogServing() const;
};

absl::Status Daemon::State::Live() {
  absl::MutexLock lock(&mu);
  if (shut_down) return absl::UnavailableError("gpumuxd is shutting down");
  return deaf_listener;
}

absl::Status Daemon::State::Ready() {
  GPUMUX_RETURN_IF_ERROR(Live());
  for (int d = 0; d < backend->device_count(); ++d) {
    if (absl::Status health = backend->DeviceHealth(DeviceIndex(d)); !health.ok()) {
      return absl::UnavailableError(absl::StrCat("device ", d, ": ", health.message()));
    }
  }
  return absl::OkStatus();
}

void Daemon::State::WatchHealth() {
  std::vector<bool> healthy(backend->device_count(), true);
  absl::MutexLock lock(&mu);
  while (!mu.AwaitWithTimeout(absl::Condition(&shut_down), absl::Seconds(1))) {
    bool all_healthy = true;
    bool changed = false;
    for (int d = 0; d < backend->device_count(); ++d) {
      const bool ok = backend->DeviceHealth(DeviceIndex(d)).ok();
      changed |= ok != healthy[d];
      healthy[d] = ok;
      all_healthy &= ok;
    }
    if (!changed) continue;
    // Operators' probes of gpumux.v1.Device see the lost device; the daemon
    // keeps serving the others.
    for (grpc::Server* server : {unix_server.get(), tcp_server.get()}) {
      if (server != nullptr)
        server->GetHealthCheckService()->SetServingStatus("gpumux.v1.Device", all_healthy);
    }
    spdlog::warn("device health changed: gpumux.v1.Device is now {}",
                 all_healthy ? "SERVING" : "NOT_SERVING");
  }
}

void Daemon::State::WatchListener() {
  constexpr absl::Duration kEvery = absl::Seconds(3);
  constexpr absl::Duration kDeadline = absl::Seconds(2);
  int failures = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu);
      if (mu.AwaitWithTimeout(absl::Condition(&shut_down), kEvery)) return;
    }
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    auto device = v1::Device::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("unix://", options.socket_path),
                                  grpc::InsecureChannelCredentials(), arguments));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
    v1::GetDeviceCountResponse count;
    const grpc::Status answer =
        device->GetDeviceCount(&context, v1::GetDeviceCountRequest(), &count);
    // Any answer of the service means the connection was accepted.
    const bool accepted = answer.error_code() != grpc::StatusCode::UNAVAILABLE &&
                          answer.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
    failures = accepted ? 0 : failures + 1;
    absl::MutexLock lock(&mu);
    if (shut_down) return;
    const bool was_deaf = !deaf_listener.ok();
    if (failures >= 2 && !was_deaf) {
      deaf_listener = absl::UnavailableError(absl::StrCat(
          "the Unix socket unix://", options.socket_path,
          " accepts no connections (a call on a new one failed twice: ", answer.error_message(),
          "); restart gpumuxd"));
      spdlog::error("{}", std::string(deaf_listener.message()));
    } else if (accepted && was_deaf) {
      deaf_listener = absl::OkStatus();
      spdlog::warn("the Unix socket unix://{} accepts connections again", options.socket_path);
    } else {
      continue;
    }
    // Now deaf: NOT_SERVING; accepting again: SERVING.
    if (tcp_server != nullptr) tcp_server->GetHealthCheckService()->SetServingStatus(was_deaf);
  }
}

absl::Status Daemon::State::StartTcpServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
  DeviceBackend* device = backend.get();
  const bool full = options.tcp_mode == "full";
  tcp.device = std::make_unique<DeviceService>(device, &executor, &sessions, streams.get());
  tcp.observe =
      std::make_unique<ObserveService>(memory.get(), streams.get(), &sessions, queries.get(),
                                       &executor, options.client_reply_timeout);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, std::move(credentials), &tcp_port);
  builder.RegisterService(tcp.device.get());
  builder.RegisterService(tcp.observe.get());
  if (full) {
    tcp.session =
        std::make_unique<SessionService>(lifecycle.get(), &sessions, queries.get(), device->name(),
                                         memory->allocator().options().conf, profiler.get());
    tcp.memory = std::make_unique<MemoryService>(memory.get(), &sessions, relief.get(), &executor);
    tcp.stream = std::make_unique<StreamService>(streams.get(), &sessions, &executor);
    tcp.event = std::make_unique<EventService>(streams.get(), &sessions, &executor);
    tcp.copy = std::make_unique<CopyService>(work.get(), staging.get(), &sessions, &executor);
    tcp.comm = std::make_unique<CommService>(comm.get(), &sessions, &executor);
    tcp.group =
        std::make_unique<GroupService>(groups.get(), group_work.get(), &sessions, &executor);
    tcp.rendezvous = std::make_unique<RendezvousService>(&rendezvous);
    tcp.random = std::make_unique<RandomService>(rng.get(), work.get(), &sessions, &executor);
    tcp.nvtx = std::make_unique<NvtxService>(nvtx.get(), &sessions, profiler.get());
    tcp.admin_refusal = std::make_unique<AdminDenyService>(absl::StrCat(
        "gpumux.v1.Admin is not served over TCP: on the daemon's machine, connect to the admin "
        "socket ",
        AdminSocketPath(options.socket_path), " as root or gpumuxd's user"));
    for (grpc::Service* service : std::initializer_list<grpc::Service*>{
             tcp.session.get(), tcp.memory.get(), tcp.stream.get(), tcp.event.get(), tcp.copy.get(),
             tcp.comm.get(), tcp.group.get(), tcp.rendezvous.get(), tcp.random.get(),
             tcp.nvtx.get(), tcp.admin_refusal.get()}) {
      builder.RegisterService(service);
    }
    builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
    builder.SetMaxSendMessageSize(kMaxMessageBytes);
    builder.RegisterCallbackGenericService(tcp_unserved.get());
    LimitCallMetadata(builder);
  } else {
    builder.RegisterCallbackGenericService(&tcp_deny_service);
  }
  builder.experimental().SetInterceptorCreators(Interceptors(&call_metrics));
  tcp_server = builder.BuildAndStart();
  if (tcp_server == nullptr || tcp_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on TCP address ", options.listen_address));
  }
  // Health knows the services this listener serves (the others are
  // NOT_FOUND, as their calls are refused).
  if (full) {
    for (const char* name : kServiceNames)
      tcp_server->GetHealthCheckService()->SetServingStatus(name, true);
    tcp_server->GetHealthCheckService()->SetServingStatus("gpumux.v1.Rendezvous", true);
  } else {
    for (const char* name : kTcpServiceNames)
      tcp_server->GetHealthCheckService()->SetServingStatus(name, true);
  }
  return absl::OkStatus();
}

Daemon::Daemon(std::unique_ptr<State> state) : state_(std::move(state)) {}

Daemon::~Daemon() { Shutdown(); }

namespace {

// What Start reads from its options once they are checked.
struct CheckedOptions {
  AllocatorOptions allocator;
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials;
  std::optional<gid_t> socket_gid;
};

// Every check of Start's options that needs nothing built: INVALID_ARGUMENT
// naming the flag, or the errors of reading the TLS files and the group.
absl::StatusOr<CheckedOptions> CheckOptions(const Daemon::Options& options) {
  CheckedOptions checked;
  GPUMUX_ASSIGN_OR_RETURN(checked.allocator, AllocatorOptions::Parse(options.allocator_conf));
  if (!options.listen_address.empty())
    GPUMUX_RETURN_IF_ERROR(ParseHostPort("--listen", options.listen_address).status());
  if (!options.metrics_listen_address.empty()) {
    GPUMUX_RETURN_IF_ERROR(
        ParseHostPort("--metrics-listen", options.metrics_listen_address).status());
  }
  GPUMUX_ASSIGN_OR_RETURN(checked.tcp_credentials, TcpCredentials(options));
  for (auto [flag, value] : {std::pair<const char*, size_t>{"--max-sessions", options.max_sessions},
                             {"--max-streams", options.max_streams},
                             {"--max-events", options.max_events},
                             {"--max-share-tokens", options.max_share_tokens},
                             {"--blocking-threads", options.blocking_threads}}) {
    if (value == 0) return absl::InvalidArgumentError(absl::StrCat(flag, " must be at least 1"));
  }
  if (options.client_reply_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--client-reply-timeout must be positive");
  }
  if (options.memory_socket_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--memory-socket-idle-timeout must be positive");
  }
  if (options.snapshot_answer_reuse < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--snapshot-answer-reuse must not be negative");
  }
  if (options.profile_memory < 4 * DeviceProfiler::kRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--profile-memory must be at least ",
                                                   4 * DeviceProfiler::kRecordBytes,
                                                   " bytes: a record for each session's quarter"));
  }
  for (const Daemon::Options::TenantMemoryLimit& limit : options.tenant_memory_limits) {
    if (absl::Status status = CheckTenantName(limit.tenant); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tenant-memory-limit: tenant '", limit.tenant, "': ", status.message()));
    }
    if (limit.bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--tenant-memory-limit: tenant '",
                                                     limit.tenant, "': a limit must be positive"));
    }
  }
  if (!options.socket_group.empty()) {
    GPUMUX_ASSIGN_OR_RETURN(checked.socket_gid, LookUpGroup(options.socket_group));
  }
  return checked;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const Options& options) {
  GPUMUX_ASSIGN_OR_RETURN(CheckedOptions checked, CheckOptions(options));
  const uint64_t connection_descriptors = BudgetDescriptors();
  auto state = std::make_unique<State>(options);
  GPUMUX_RETURN_IF_ERROR(state->OpenBackend(checked.allocator));
  GPUMUX_RETURN_IF_ERROR(state->BuildCore(checked.allocator));
  state->BuildServices();
  GPUMUX_RETURN_IF_ERROR(state->StartListeners(
      checked.socket_gid, std::move(checked.tcp_credentials), connection_descriptors));
  State& s = *state;
  s.health_watcher = std::thread([&s] { s.WatchHealth(); });
  s.listener_watcher = std::thread([&s] { s.WatchListener(); });
  s.LogServing();
  return std::unique_ptr<Daemon>(new Daemon(std::move(state)));
}

absl::Status Daemon::State::OpenBackend(const AllocatorOptions& allocator_options) {
  GPUMUX_ASSIGN_OR_RETURN(
      backend, MakeBackend(options, allocator_options.expandable_segments, &memory_files));
  if (allocator_options.expandable_segments && !backend->SupportsExpandableSegments()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--allocator-conf: expandable_segments:True (and compact_segments:True) need virtual "
        "memory management on the ",
        backend->name(), " backend: ", ExpandableSegmentsUnavailable(*backend),
        "; leave them off"));
  }
  return PrepareSocketPath(options.socket_path);
}

absl::Status Daemon::State::BuildCore(const AllocatorOptions& allocator_options) {
  DeviceBackend* device = backend.get();
  sessions.set_max_sessions(options.max_sessions);
  profiler = std::make_unique<DeviceProfiler>(device, options.profile_memory);
  streams = std::make_unique<StreamManager>(
      device,
      StreamManager::Limits{.max_streams = options.max_streams, .max_events = options.max_events},
      profiler.get());
  memory = std::make_unique<MemoryManager>(
      device, allocator_options, &sessions, streams.get(),
      MemoryManager::Limits{.max_share_tokens = options.max_share_tokens}, &memory_files);
  for (const Options::TenantMemoryLimit& limit : options.tenant_memory_limits) {
    // Checked by CheckOptions: this cannot fail.
    GPUMUX_RETURN_IF_ERROR(memory->SetTenantLimit(limit.tenant, std::nullopt, limit.bytes));
  }
  staging = std::make_unique<StagingBuffers>(device, &memory_files);
  rng = std::make_unique<RngGenerators>(device->device_count());
#ifdef GPUMUX_HAVE_CUDA
  nvtx_sink = std::make_unique<Nvtx3Sink>();
#endif
  nvtx = std::make_unique<NvtxRanges>(nvtx_sink.get());
  work = std::make_unique<DeviceWork>(device, memory.get(), streams.get(), staging.get(), rng.get(),
                                      profiler.get());
  comm = std::make_unique<CommWork>(device, memory.get(), streams.get(), staging.get(),
                                    profiler.get());
  GPUMUX_ASSIGN_OR_RETURN(
      peers, PeerChannels::Create(PeerSecurityFiles{.tls_ca_file = options.tls_client_ca_file,
                                                    .tls_cert_file = options.tls_cert_file,
                                                    .tls_key_file = options.tls_key_file,
                                                    .auth_token_file = options.auth_token_file}));
  const std::string group_host = GroupHost(options);
  gloo = std::make_unique<GlooTransports>(group_host);
  groups = std::make_unique<GroupRegistry>(
      &rendezvous,
      GroupRegistry::Hooks{
          .connect_rendezvous =
              [this](const std::string& address) { return peers->Rendezvous(address); },
          .connect_transport = [this, device](RendezvousPoint& point, const GroupSpec& spec,
                                              uint64_t generation)
              -> absl::StatusOr<std::unique_ptr<GroupTransport>> {
            GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<GroupTransport> host,
                                    gloo->Connect(point, spec, generation));
            return AddDeviceCommunicator(std::move(host), device->collectives(), point, spec,
                                         generation);
          },
          .probe = [this](const std::string& address,
                          absl::Duration timeout) { return peers->Probe(address, timeout); },
          .own_address =
              [this, group_host] {
                return tcp_port == 0 ? std::string() : JoinHostPort(group_host, tcp_port);
              },
          .serves_rendezvous = !options.listen_address.empty() && options.tcp_mode == "full"});
  group_work = std::make_unique<GroupWork>(groups.get(), device, memory.get(), streams.get(),
                                           profiler.get());
  lifecycle =
      std::make_unique<SessionLifecycle>(&sessions, memory.get(), streams.get(), staging.get(),
                                         rng.get(), nvtx.get(), profiler.get(), groups.get());
  queries = std::make_unique<ClientQueries>(&sessions, options.snapshot_answer_reuse);
  relief =
      std::make_unique<PressureRelief>(memory.get(), queries.get(), options.client_reply_timeout);
  return absl::OkStatus();
}

void Daemon::State::BuildServices() {
  DeviceBackend* device = backend.get();
  session_service =
      std::make_unique<SessionService>(lifecycle.get(), &sessions, queries.get(), device->name(),
                                       memory->allocator().options().conf, profiler.get());
  memory_service =
      std::make_unique<MemoryService>(memory.get(), &sessions, relief.get(), &executor);
  stream_service = std::make_unique<StreamService>(streams.get(), &sessions, &executor);
  event_service = std::make_unique<EventService>(streams.get(), &sessions, &executor);
  copy_service = std::make_unique<CopyService>(work.get(), staging.get(), &sessions, &executor);
  comm_service = std::make_unique<CommService>(comm.get(), &sessions, &executor);
  group_service =
      std::make_unique<GroupService>(groups.get(), group_work.get(), &sessions, &executor);
  random_service = std::make_unique<RandomService>(rng.get(), work.get(), &sessions, &executor);
  nvtx_service = std::make_unique<NvtxService>(nvtx.get(), &sessions, profiler.get());
  profile_service = std::make_unique<ProfileService>(profiler.get(), &sessions, &executor);
  device_service = std::make_unique<DeviceService>(device, &executor, &sessions, streams.get());
  observe_service =
      std::make_unique<ObserveService>(memory.get(), streams.get(), &sessions, queries.get(),
                                       &executor, options.client_reply_timeout);
  const std::string admin_path = AdminSocketPath(options.socket_path);
  admin_service =
      std::make_unique<AdminService>(memory.get(), lifecycle.get(), profiler.get(), &sessions,
                                     queries.get(), &executor, options.client_reply_timeout);
  admin_refusal = std::make_unique<AdminDenyService>(absl::StrCat(
      "gpumux.v1.Admin serves only root and gpumuxd's own uid ", geteuid(),
      " (the peer credentials of this connection to ", admin_path, " are another user's)"));
  unix_admin_refusal = std::make_unique<AdminDenyService>(
      absl::StrCat("gpumux.v1.Admin is not served on this socket: connect to the admin socket ",
                   admin_path, " as root or gpumuxd's user"));
}

absl::Status Daemon::State::StartListeners(const std::optional<gid_t>& socket_gid,
                                           std::shared_ptr<grpc::ServerCredentials> tcp_credentials,
                                           uint64_t connection_descriptors) {
  InstallProtobufLogHandler();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  // Before the main socket, so that a daemon answering there serves Admin too.
  GPUMUX_RETURN_IF_ERROR(StartAdminSocket(socket_gid));
  // The TCP listener first: once the Unix socket answers, the daemon's
  // address for the other daemons of a group (its TCP port) is known.
  if (!options.listen_address.empty()) {
    GPUMUX_RETURN_IF_ERROR(StartTcpServer(std::move(tcp_credentials)));
  }
  if (absl::Status status = StartUnixServer(socket_gid); !status.ok()) {
    if (tcp_server != nullptr) tcp_server->Shutdown();
    return status;
  }
  absl::StatusOr<std::unique_ptr<MemorySocketServer>> started = MemorySocketServer::Start(
      MemorySocketServer::Options{.path = MemorySocketPath(options.socket_path),
                                  .group = socket_gid,
                                  // Half of the descriptors kept for connections at most.
                                  .max_connections = static_cast<size_t>(
                                      std::min<uint64_t>(8192, connection_descriptors / 2)),
                                  .max_connections_per_uid = static_cast<size_t>(
                                      std::min<uint64_t>(1024, connection_descriptors / 4)),
                                  .idle_timeout = options.memory_socket_idle_timeout},
      &sessions, &memory_files);
  if (!started.ok()) {
    unix_server->Shutdown();
    if (tcp_server != nullptr) tcp_server->Shutdown();
    return started.status();
  }
  memory_socket = *std::move(started);

  for (grpc::Server* server : {unix_server.get(), tcp_server.get(), admin_server.get()}) {
    if (server == nullptr) continue;
    server->GetHealthCheckService()->SetServingStatus(true);
  }
  admin_server->GetHealthCheckService()->SetServingStatus("gpumux.v1.Admin", true);
  for (const char* name : kServiceNames)
    unix_server->GetHealthCheckService()->SetServingStatus(name, true);
  unix_server->GetHealthCheckService()->SetServingStatus("gpumux.v1.Profile", true);

  if (absl::Status status = StartMetricsServer(); !status.ok()) {
    if (tcp_server != nullptr) tcp_server->Shutdown();
    unix_server->Shutdown();
    return status;
  }
  return absl::OkStatus();
}

absl::Status Daemon::State::StartAdminSocket(const std::optional<gid_t>& socket_gid) {
  // The admin servers listen nowhere: the admin socket hands them each
  // connection by descriptor, after reading its peer's credentials.
  for (auto [service, unserved, server] :
       {std::tuple<grpc::Service*, UnservedMethodService*, std::unique_ptr<grpc::Server>*>{
            admin_service.get(), admin_unserved.get(), &admin_server},
        {admin_refusal.get(), admin_refusal_unserved.get(), &admin_refusal_server}}) {
    grpc::ServerBuilder builder;
    builder.RegisterService(service);
    builder.RegisterCallbackGenericService(unserved);
    builder.experimental().SetInterceptorCreators(Interceptors(&call_metrics));
    LimitCallMetadata(builder);
    *server = builder.BuildAndStart();
    if (*server == nullptr) {
      return absl::UnavailableError("cannot start the admin service's gRPC server");
    }
  }
  GPUMUX_ASSIGN_OR_RETURN(
      admin_socket, AdminSocketServer::Start(
                        AdminSocketServer::Options{.path = AdminSocketPath(options.socket_path),
                                                   .group = socket_gid},
                        admin_server.get(), admin_refusal_server.get()));
  return absl::OkStatus();
}

absl::Status Daemon::State::StartUnixServer(const std::optional<gid_t>& socket_gid) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", options.socket_path),
                           grpc::InsecureServerCredentials());
  for (grpc::Service* service : std::initializer_list<grpc::Service*>{
           session_service.get(), memory_service.get(), device_service.get(), observe_service.get(),
           stream_service.get(), event_service.get(), copy_service.get(), comm_service.get(),
           group_service.get(), random_service.get(), nvtx_service.get(), profile_service.get(),
           unix_admin_refusal.get()}) {
    builder.RegisterService(service);
  }
  builder.RegisterCallbackGenericService(unix_unserved.get());
  builder.experimental().SetInterceptorCreators(Interceptors(&call_metrics));
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  LimitCallMetadata(builder);
  unix_server = builder.BuildAndStart();
  if (unix_server == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix socket ", options.socket_path));
  }
  if (socket_gid.has_value() &&
      chown(options.socket_path.c_str(), static_cast<uid_t>(-1), *socket_gid) != 0) {
    const int error = errno;
    unix_server->Shutdown();
    return absl::PermissionDeniedError(absl::StrCat("cannot give ", options.socket_path,
                                                    " to group '", options.socket_group,
                                                    "': ", std::strerror(error)));
  }
  // Who may connect rests on this mode: without it the daemon does not serve.
  if (chmod(options.socket_path.c_str(), 0660) != 0) {
    const int error = errno;
    unix_server->Shutdown();
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set mode 0660 on ", options.socket_path, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status Daemon::State::StartMetricsServer() {
  if (options.metrics_listen_address.empty()) return absl::OkStatus();
  MetricsSources sources{.backend = backend.get(),
                         .memory = memory.get(),
                         .sessions = &sessions,
                         .streams = streams.get(),
                         .lifecycle = lifecycle.get(),
                         .version = GPUMUX_VERSION,
                         .append = [this](PrometheusText& text) { call_metrics.AppendTo(text); }};
  GPUMUX_ASSIGN_OR_RETURN(
      metrics_server,
      MetricsHttpServer::Start(
          {.address = options.metrics_listen_address,
           .metrics = [sources = std::move(sources)] { return RenderMetrics(sources); },
           .ready = [this] { return Ready(); },
           .live = [this] { return Live(); }}));
  return absl::OkStatus();
}

void Daemon::State::LogServing() const {
  spdlog::info(
      "gpumuxd serving on unix://{} (shared memory on {}, admin on {}){}{}; backend {} with {} "
      "devices",
      options.socket_path, memory_socket->path(), admin_socket->path(),
      options.listen_address.empty()
          ? ""
          : absl::StrCat(options.tcp_mode == "full" ? " and the full API on TCP "
                                                    : " and observe-only on TCP ",
                         options.listen_address.substr(0, options.listen_address.rfind(':')), ":",
                         tcp_port,
                         options.tls_cert_file.empty()         ? " (plaintext)"
                         : !options.tls_client_ca_file.empty() ? " (mutual TLS"
                                                               : " (TLS",
                         options.tls_cert_file.empty()     ? ""
                         : options.auth_token_file.empty() ? ")"
                                                           : ", bearer token)"),
      metrics_server == nullptr ? ""
                                : absl::StrCat(", metrics on http://",
                                               options.metrics_listen_address.substr(
                                                   0, options.metrics_listen_address.rfind(':')),
                                               ":", metrics_server->port(), "/metrics"),
      backend->name(), backend->device_count());
  for (int d = 0; d < backend->device_count(); ++d) {
    const DeviceInfo& info = backend->device_info(DeviceIndex(d));
    spdlog::info("device {}: {} ({})", d, info.name, FormatTorchSize(info.total_memory));
  }
}

void Daemon::Shutdown(int deadline_ms) {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->shut_down) return;
    state_->shut_down = true;
  }
  State& s = *state_;
  if (s.metrics_server != nullptr) s.metrics_server->Stop();
  if (s.health_watcher.joinable()) s.health_watcher.join();
  if (s.listener_watcher.joinable()) s.listener_watcher.join();
  for (grpc::Server* server : {s.unix_server.get(), s.tcp_server.get(), s.admin_server.get()}) {
    if (server != nullptr) server->GetHealthCheckService()->SetServingStatus(false);
  }
  // Ends every session stream now (their clients see UNAVAILABLE); the rest of
  // the in-flight calls get until the deadline, and those that fail because
  // their session ended under them say UNAVAILABLE too.
  s.sessions.BeginShutdown();
  s.profiler->Shutdown();  // windows of `gpumux profile` end now
  s.sessions.TerminateAll("gpumuxd is shutting down");
  // Calls blocked on other processes' events (a hung client's) end now, so
  // the servers' shutdown is not held up by them.
  s.backend->AbandonInterprocessWaits();
  // Rendezvous waits end, and every group closes (after its running
  // collective, which its timeout bounds).
  s.rendezvous.Close();
  s.groups->Close();
  auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms);
  if (s.tcp_server != nullptr) s.tcp_server->Shutdown(deadline);
  s.admin_socket->Stop();  // no connection reaches the admin servers after this
  s.admin_server->Shutdown(deadline);
  s.admin_refusal_server->Shutdown(deadline);
  s.unix_server->Shutdown(deadline);
  s.unix_server->Wait();
  s.memory_socket->Stop();
  // Any session whose stream did not report its end in time.
  for (const SessionRecord& info : s.sessions.List())
    s.lifecycle->Close(info.id, SessionEndReason::kShutdown, "daemon shutting down");
  std::error_code ec;
  std::filesystem::remove(s.options.socket_path, ec);
  // Every session was reclaimed: what is left reserved is a leak.
  int64_t reserved = 0;
  for (int d = 0; d < s.memory->device_count(); ++d) {
    absl::StatusOr<DeviceStats> stats = s.memory->GetStats(DeviceIndex(d), std::nullopt);
    if (stats.ok()) reserved += stats->reserved_bytes[kAggregate].current;
  }
  if (reserved == 0) {
    spdlog::info("gpumuxd stopped: every session ended, no segment left reserved");
  } else {
    spdlog::error("gpumuxd stopped with {} bytes of segments still reserved", reserved);
  }
}

const std::string& Daemon::socket_path() const { return state_->options.socket_path; }
int Daemon::tcp_port() const { return state_->tcp_port; }
int Daemon::metrics_port() const {
  return state_->metrics_server == nullptr ? 0 : state_->metrics_server->port();
}
const DeviceBackend& Daemon::backend() const { return *state_->backend; }

}  // namespace gpumux
