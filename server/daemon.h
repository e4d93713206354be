#pragma once

// Daemon: gpumuxd assembled. It picks a backend, builds the memory books and
// session registry, and serves every service on a Unix socket (mode 0660) and,
// optionally, the read-only observe surface on a TCP listener. Start() returns
// once both listeners accept calls; Shutdown() stops accepting, ends every
// session (releasing what it held) and returns the backend's memory.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

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
    // "HOST:PORT" for the observe-only TCP listener; empty for none. Port 0
    // picks a free port (see tcp_port()).
    std::string listen_address;
    // "auto", "host" or "cuda".
    std::string backend = "auto";
    int host_devices = 2;
    uint64_t host_device_memory = uint64_t{8} << 30;
    // PYTORCH_CUDA_ALLOC_CONF syntax, e.g. "max_split_size_mb:128".
    std::string allocator_conf;
  };

  // INVALID_ARGUMENT for bad options, UNAVAILABLE when a listener cannot bind,
  // FAILED_PRECONDITION when another daemon serves the socket or the backend
  // is not available in this build.
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
  const DeviceBackend& backend() const;

 private:
  struct State;
  explicit Daemon(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gpumux
