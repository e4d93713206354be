#pragma once

// Daemon: gpumuxd assembled. It picks a backend, builds the memory books and
// session registry, and serves every service on a Unix socket (mode 0660) and,
// optionally, on a TCP listener the read-only observe surface, or with TLS and
// a token everything but Admin, and /metrics on an HTTP listener;
// gpumux.v1.Admin only on the admin socket next to the Unix one
// (common/net/admin_socket.h). Start() returns
// once both listeners accept calls; Shutdown() stops accepting, ends every
// session (releasing what it held) and returns the backend's memory.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpumux {

class DeviceBackend;
class MemoryManager;
class SessionRegistry;

class Daemon {
 public:
  struct Options {
    // Unix socket path; its directory is created if missing. A stale socket
    // file is replaced; a live daemon on it is FAILED_PRECONDITION.
    std::string socket_path;
    // Group that owns the socket (mode 0660), so that its non-root members
    // may connect; empty: the daemon's own group.
    std::string socket_group;
    // "HOST:PORT" (IPv6 as "[ADDR]:PORT") for the TCP listener; empty for
    // none. Port 0 picks a free port (see tcp_port()).
    std::string listen_address;
    // What the TCP listener serves: "observe", the read-only Device and
    // Observe services (everything else PERMISSION_DENIED), or "full", every
    // service of the Unix socket but gpumux.v1.Admin, which needs TLS and a
    // token. README "The full API over TCP (TLS)".
    std::string tcp_mode = "observe";
    // PEM files of the TCP listener's TLS, in either mode: its certificate
    // chain and private key (both or neither), and a CA that must have signed
    // every client's certificate (mutual TLS; optional). Empty: plaintext.
    std::string tls_cert_file;
    std::string tls_key_file;
    std::string tls_client_ca_file;
    // A file holding the bearer token that every call over TCP must carry
    // (`authorization: Bearer <token>`; grpc.health.v1.Health/Check exempt);
    // needs TLS. Empty: no token (observe mode only).
    std::string auth_token_file;
    // The address (name or IP) the daemons of a group reach this one at:
    // its Gloo connections listen there, and with the TCP port it is the
    // address it advertises to them. Empty: the host of listen_address
    // unless it is a wildcard, else the machine's hostname.
    std::string group_host;
    // "HOST:PORT" of the HTTP listener for /metrics, /healthz and /readyz
    // (server/http/metrics_http_server.h); empty for none. Port 0 picks a
    // free port (see metrics_port()).
    std::string metrics_listen_address;
    // "auto", "host" or "cuda".
    std::string backend = "auto";
    // The CUDA backend's collectives: "auto" loads libnccl.so.2 where the
    // loader finds it, "off" uses peer copies and the reduction kernel, any
    // other value is the path of the libnccl to load (which must load).
    std::string nccl = "auto";
    int host_devices = 2;
    uint64_t host_device_memory = uint64_t{8} << 30;
    // Worker threads that run every host-backend stream (1 to 256).
    int host_stream_workers = 8;
    // PYTORCH_CUDA_ALLOC_CONF syntax, e.g. "max_split_size_mb:128".
    std::string allocator_conf;
    // Daemon-wide budgets over all sessions; each refusal is
    // RESOURCE_EXHAUSTED naming the flag, and a log line. Must be positive.
    size_t max_sessions = 4096;
    size_t max_streams = 16384;  // created streams (default streams not counted)
    size_t max_events = 1 << 20;
    size_t max_share_tokens = 262144;
    // Threads for calls that may block (synchronize, waited copies), over all
    // sessions; past it such calls queue for a free one.
    size_t blocking_threads = 512;
    // Byte limits on the segments of all sessions of a tenant together, on
    // every device (gpumuxd --tenant-memory-limit); gpumux.v1.Admin changes
    // them at run time. Each tenant a valid name (CheckTenantName), each
    // limit positive.
    struct TenantMemoryLimit {
      std::string tenant;
      uint64_t bytes = 0;
    };
    std::vector<TenantMemoryLimit> tenant_memory_limits;
    // How long the daemon waits for a local-allocating client to answer a
    // question on its session stream (gpumuxd --client-reply-timeout): to
    // return its cached leases for another session's allocation, or to list
    // its blocks for a snapshot. Must be positive.
    absl::Duration client_reply_timeout = absl::Seconds(1);
    // How long a client's list of its blocks serves further snapshots
    // (gpumuxd --snapshot-answer-reuse): snapshots asked for in a loop, from
    // the observe port too, ask each client at most once per this. 0: ask at
    // every snapshot.
    absl::Duration snapshot_answer_reuse = absl::Milliseconds(250);
    // The memory every open profile's records may take together
    // (gpumuxd --profile-memory); the profiles of one session a quarter of
    // it (DeviceProfiler).
    uint64_t profile_memory = uint64_t{1} << 30;
    // A memory socket connection that sends nothing this long is closed
    // (gpumuxd --memory-socket-idle-timeout); clients connect again.
    absl::Duration memory_socket_idle_timeout = absl::Seconds(30);
  };

  // INVALID_ARGUMENT for bad options (a listen address without a port in
  // 0-65535, an unknown socket group, a budget of 0, a bad tenant limit; TCP
  // security as MakeTcpServerCredentials refuses it: full mode without TLS or
  // token, a TLS or token file unreadable or invalid, naming flag, path and
  // reason; TCP options without a listen address), UNAVAILABLE when a
  // listener cannot bind, FAILED_PRECONDITION when another daemon serves the socket or the backend
  // is not available in this build, PERMISSION_DENIED when a socket cannot
  // be given its group or mode 0660.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const Options& options);

  // Shuts down if still running.
  ~Daemon();

  // Idempotent. Session streams end at once (UNAVAILABLE); other in-flight
  // calls get until `deadline_ms` to finish. Every handler finishes its call
  // before returning, so the deadline mostly bounds how long gRPC waits for
  // idle client connections to acknowledge its GOAWAY.
  void Shutdown(int deadline_ms = 250);

  const std::string& socket_path() const;
  // The bound TCP port, 0 without a TCP listener.
  int tcp_port() const;
  // The bound HTTP port, 0 without a metrics listener.
  int metrics_port() const;
  const DeviceBackend& backend() const;

 private:
  struct State;
  explicit Daemon(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gpumux
