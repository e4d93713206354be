// gpumuxd: turns flags into Daemon::Options, runs the daemon until SIGTERM or
// SIGINT, then shuts it down cleanly.

#include <signal.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/byte_size.h"
#include "common/base/logging.h"
#include "gpumux/common/default_address.h"
#include "server/daemon.h"
#include "server/tenant_memory_limit_flag.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, socket, gpumux::DefaultSocketPath(),
          "Unix socket to serve every service on");
ABSL_FLAG(std::string, socket_group, "",
          "group that owns the socket (mode 0660), so its non-root members may connect");
ABSL_FLAG(std::string, listen, "", "HOST:PORT of a TCP listener, serving what --tcp-mode says");
ABSL_FLAG(std::string, tcp_mode, "observe",
          "what the --listen TCP listener serves: observe (the read-only Device and Observe "
          "services) or full (every service but Admin and Profile; needs --tls-cert, --tls-key and "
          "--auth-token-file)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the TCP listener, which then speaks TLS (with --tls-key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert (unencrypted)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: TCP clients must present a certificate one of them signed "
          "(mutual TLS)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding the bearer token every TCP call must carry as 'authorization: Bearer "
          "<token>' (a trailing newline is dropped; needs TLS; grpc.health.v1.Health/Check is "
          "exempt)");
ABSL_FLAG(std::string, group_host, "",
          "address (name or IP) other daemons of a group reach this one at, for its group "
          "connections and, with --listen's port, its rendezvous and probes; default: --listen's "
          "host unless it is a wildcard, else the hostname");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT of an HTTP listener for Prometheus's /metrics, /healthz and /readyz (off by "
          "default; gpumux's port is 9408, e.g. 0.0.0.0:9408)");
ABSL_FLAG(std::string, backend, "auto", "auto, host or cuda");
ABSL_FLAG(std::string, nccl, "auto",
          "NCCL for the CUDA backend's collectives: auto (libnccl.so.2 where the loader finds "
          "it), off (peer copies and a reduction kernel), or the path of a libnccl.so");
ABSL_FLAG(int, host_devices, 2, "number of emulated devices of the host backend");
ABSL_FLAG(std::string, host_device_memory, "8GiB",
          "memory of each emulated device: a number with B, KiB, MiB, GiB, TiB, KB, MB, GB or TB");
ABSL_FLAG(int, host_stream_workers, 8, "worker threads that run all host-backend streams (1-256)");
ABSL_FLAG(
    std::string, allocator_conf, "",
    "caching allocator options in PYTORCH_CUDA_ALLOC_CONF syntax, e.g. max_split_size_mb:128");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(uint64_t, max_sessions, 4096, "most sessions open at once, over all clients");
ABSL_FLAG(uint64_t, max_streams, 16384,
          "most created streams at once, over all sessions (default streams aside)");
ABSL_FLAG(uint64_t, max_events, 1 << 20, "most events at once, over all sessions");
ABSL_FLAG(uint64_t, max_share_tokens, 262144,
          "most share tokens of live allocations, over all sessions");
ABSL_FLAG(uint64_t, blocking_threads, 512,
          "most threads for calls that may block (synchronize, waited copies)");
ABSL_FLAG(absl::Duration, client_reply_timeout, absl::Seconds(1),
          "how long to wait for a client that allocates locally to answer the daemon: to return "
          "its cached leases for another session (memory pressure), or to list its blocks for a "
          "snapshot");
ABSL_FLAG(absl::Duration, memory_socket_idle_timeout, absl::Seconds(30),
          "a memory socket connection that sends nothing this long is closed (clients connect "
          "again); one uid may hold 1024 connections");
ABSL_FLAG(std::string, profile_memory, "1GiB",
          "the memory every open profile's records may take together; one session's profiles a "
          "quarter of it");
ABSL_FLAG(absl::Duration, snapshot_answer_reuse, absl::Milliseconds(250),
          "how long a local-allocating client's list of its blocks serves further snapshots, so "
          "that snapshots in a loop ask it at most once per this; 0 asks at every snapshot");
ABSL_FLAG(std::string, tenant_memory_limit, "",
          "TENANT=SIZE[,TENANT=SIZE...]: a byte limit on all sessions of each tenant together, on "
          "every device (repeatable; SIZE as for --host-device-memory; gpumux tenant-limit changes "
          "it at run time)");

namespace {

// Abseil keeps only the last value of a repeated flag: every "--NAME=V" and
// "--NAME V" of the list `flag` is joined into one "--NAME=V1,V2" where the
// first stood.
void JoinRepeated(const std::string& flag, std::vector<std::string>& args) {
  std::vector<std::string> kept;
  std::vector<std::string> values;
  size_t first = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (i > 0 && arg == "--") {  // the rest are positional
      kept.insert(kept.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    std::string value;
    if (arg.rfind(flag + "=", 0) == 0) {
      value = arg.substr(flag.size() + 1);
    } else if (arg == flag && i + 1 < args.size()) {
      value = args[++i];
    } else {
      kept.push_back(arg);
      continue;
    }
    if (values.empty()) first = kept.size();
    values.push_back(std::move(value));
  }
  if (values.empty()) return;
  kept.insert(kept.begin() + static_cast<std::ptrdiff_t>(first),
              flag + "=" + absl::StrJoin(values, ","));
  args = std::move(kept);
}

// The documented spelling is --host-device-memory; Abseil flag names cannot
// hold dashes, so "--a-b[=v]" is read as "--a_b[=v]" (values are untouched).
std::vector<char*> DashesToUnderscores(int argc, char** argv, std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  std::vector<char*> out;
  for (std::string& arg : storage) {
    if (arg.rfind("--", 0) == 0) {
      size_t end = std::min(arg.find('='), arg.size());
      for (size_t i = 2; i < end; ++i) {
        if (arg[i] == '-') arg[i] = '_';
      }
    }
  }
  JoinRepeated("--tenant_memory_limit", storage);
  for (std::string& arg : storage) out.push_back(arg.data());
  return out;
}

// --help: every flag of gpumuxd as the README spells it (dashes), with its
// default and what it does. Abseil's own --help lists no flags of a main file.
void PrintHelp() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "server/main.cc")) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::printf(
      "usage: gpumuxd [--flag=value ...]\n"
      "The gpumux GPU resource daemon: serves the GPUs (or emulated host devices) to clients over "
      "gRPC on\n"
      "a Unix socket, and their shared memory on <socket>.memfd next to it. SIGTERM or SIGINT "
      "stops it.\n\n"
      "flags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    std::string name(flag->Name());
    std::replace(name.begin(), name.end(), '_', '-');
    const std::string fallback = flag->DefaultValue();
    std::printf("  --%s\n      %s (default: %s)\n", name.c_str(), flag->Help().c_str(),
                fallback.empty() ? "none" : fallback.c_str());
  }
  std::printf("  --help\n      this text\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> arg_storage;
  std::vector<char*> args = DashesToUnderscores(argc, argv, arg_storage);
  argv = args.data();
  argc = static_cast<int>(args.size());  // repeated flags were joined
  absl::SetProgramUsageMessage(
      "gpumuxd: the gpumux GPU resource daemon. Flags: --socket, --socket-group, --listen, "
      "--tcp-mode, --tls-cert, --tls-key, --tls-client-ca, --auth-token-file, --metrics-listen, "
      "--backend, --nccl, "
      "--host-devices, --host-device-memory, --host-stream-workers, --allocator-conf, --log-level, "
      "--max-sessions, --max-streams, --max-events, --max-share-tokens, --blocking-threads, "
      "--tenant-memory-limit");
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      PrintHelp();
      return 0;
    }
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "gpumuxd: unexpected argument '%s': gpumuxd takes only flags (see --help)\n",
                 positional[1]);
    return 2;
  }
  // Load all device code when CUDA starts: a kernel loaded lazily on first use
  // may wait for the whole context, behind other tenants' work. An explicit
  // setting in the environment wins.
  setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  // Debian's Abseil builds Mutex with deadlock detection on; it costs ~10% of
  // the allocator's hot path and the lock order is fixed by design.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  gpumux::InitLogging("gpumuxd");
  if (absl::Status s = gpumux::SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    std::fprintf(stderr, "gpumuxd: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<uint64_t> memory = gpumux::ParseByteSize(absl::GetFlag(FLAGS_host_device_memory));
  if (!memory.ok()) {
    std::fprintf(stderr, "gpumuxd: --host-device-memory: %s\n",
                 std::string(memory.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<uint64_t> profile_memory =
      gpumux::ParseByteSize(absl::GetFlag(FLAGS_profile_memory));
  if (!profile_memory.ok()) {
    std::fprintf(stderr, "gpumuxd: --profile-memory: %s\n",
                 std::string(profile_memory.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<gpumux::Daemon::Options::TenantMemoryLimit>> tenant_limits =
      gpumux::ParseTenantMemoryLimits(absl::GetFlag(FLAGS_tenant_memory_limit));
  if (!tenant_limits.ok()) {
    std::fprintf(stderr, "gpumuxd: --tenant-memory-limit: %s\n",
                 std::string(tenant_limits.status().message()).c_str());
    return 2;
  }
  gpumux::Daemon::Options options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  options.socket_group = absl::GetFlag(FLAGS_socket_group);
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.tcp_mode = absl::GetFlag(FLAGS_tcp_mode);
  options.group_host = absl::GetFlag(FLAGS_group_host);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.metrics_listen_address = absl::GetFlag(FLAGS_metrics_listen);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.nccl = absl::GetFlag(FLAGS_nccl);
  options.host_devices = absl::GetFlag(FLAGS_host_devices);
  options.host_device_memory = *memory;
  options.host_stream_workers = absl::GetFlag(FLAGS_host_stream_workers);
  options.allocator_conf = absl::GetFlag(FLAGS_allocator_conf);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.max_events = absl::GetFlag(FLAGS_max_events);
  options.max_share_tokens = absl::GetFlag(FLAGS_max_share_tokens);
  options.blocking_threads = absl::GetFlag(FLAGS_blocking_threads);
  options.tenant_memory_limits = *std::move(tenant_limits);
  options.client_reply_timeout = absl::GetFlag(FLAGS_client_reply_timeout);
  options.snapshot_answer_reuse = absl::GetFlag(FLAGS_snapshot_answer_reuse);
  options.profile_memory = *profile_memory;
  options.memory_socket_idle_timeout = absl::GetFlag(FLAGS_memory_socket_idle_timeout);

  // Signals are taken synchronously by this thread; every thread the daemon
  // starts inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<gpumux::Daemon>> daemon = gpumux::Daemon::Start(options);
  if (!daemon.ok()) {
    spdlog::critical("gpumuxd cannot start: {}", daemon.status().ToString());
    return absl::IsInvalidArgument(daemon.status()) ? 2 : 1;  // 2: a usage error, as for bad flags
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("received {}, shutting down", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->Shutdown();
  return 0;
}
