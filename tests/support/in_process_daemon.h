#pragma once

// The real gpumuxd (server/daemon.h) in this process, host backend, on a Unix
// socket in a fresh temporary directory, for testing the client library and
// CLI against what they will really talk to. It also reads the daemon's state
// through the Observe service, which needs no session and so leaves every
// client's queued frees alone. Thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/common/ids.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "server/daemon.h"

namespace gpumux::testing {

class InProcessDaemon {
 public:
  struct Options {
    int devices = 2;
    uint64_t device_memory = uint64_t{64} << 20;
    // Daemon::Options::metrics_listen_address ("127.0.0.1:0": a free port).
    std::string metrics_listen;
    // Daemon::Options::allocator_conf (PYTORCH_CUDA_ALLOC_CONF syntax).
    std::string allocator_conf;
    // Daemon::Options::profile_memory; 0 leaves the daemon's default.
    uint64_t profile_memory = 0;
  };

  // Serving when this returns; the test fails (ADD_FAILURE) when it cannot start.
  explicit InProcessDaemon(Options options);
  InProcessDaemon() : InProcessDaemon(Options()) {}
  // Shutdown(), then removes the directory.
  ~InProcessDaemon();
  InProcessDaemon(const InProcessDaemon&) = delete;
  InProcessDaemon& operator=(const InProcessDaemon&) = delete;

  // "unix:///…/gpumux.sock" and the bare socket path.
  std::string address() const { return "unix://" + socket_path_; }
  const std::string& socket_path() const { return socket_path_; }

  // The HTTP port of /metrics; 0 without options.metrics_listen.
  int metrics_port() const { return daemon_ == nullptr ? 0 : daemon_->metrics_port(); }

  // Daemon::Shutdown: open session streams end with UNAVAILABLE, the socket
  // stops accepting, every segment goes back to the backend. Idempotent.
  void Shutdown();
  // Shutdown(), then a new daemon on the same socket (a restart, as systemd
  // or Kubernetes would do it); the test fails when it cannot start.
  void Restart();

  // Observe.ListSessions; empty (and the test fails) when the call does.
  std::vector<v1::SessionInfo> Sessions() const;
  // The open session `id`, or nullopt.
  std::optional<v1::SessionInfo> Session(SessionId id) const;
  // Allocations session `id` holds on all devices; nullopt when it is not open.
  std::optional<uint64_t> LiveAllocations(SessionId id) const;

 private:
  void Start();

  Options options_;
  std::string dir_;
  std::string socket_path_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<v1::Observe::Stub> observe_;
};

}  // namespace gpumux::testing
