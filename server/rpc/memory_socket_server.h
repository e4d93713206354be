#pragma once

// MemorySocketServer: the daemon's side of the memory socket
// (common/ipc/memory_socket.h). One thread serves every connection through
// epoll: a request is a few dozen bytes and its answer a table lookup and a
// sendmsg, so no client can hold the thread. Each request is checked in
// this order, and the first failure is the reply: well-formed
// (INVALID_ARGUMENT), no descriptors attached (INVALID_ARGUMENT), the
// session's credentials (UNAUTHENTICATED; UNAVAILABLE while shutting down),
// the peer's uid (SO_PEERCRED, SessionRegistry::BindMemoryPeer:
// PERMISSION_DENIED), the key (MemoryFileTable::Find: NOT_FOUND,
// PERMISSION_DENIED). A connection that breaks the protocol (a message the
// size limits cut, a reply it does not read) is told why and closed; one
// beyond max_connections, or beyond max_connections_per_uid of its peer's
// uid, is told why and closed at once (with a rate-limited log line); one
// idle for idle_timeout is closed (a client connects again when it next
// needs to), so idle connections cannot hold every other client out.

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpumux/common/unique_fd.h"
#include "server/backend/memory_file_table.h"
#include "server/core/limit_refusal.h"
#include "server/core/session_registry.h"

namespace gpumux {

class MemorySocketServer {
 public:
  struct Options {
    // The socket path (MemorySocketPath of the gRPC socket); a stale socket
    // there must be gone already.
    std::string path;
    // Owner group of the socket (mode 0660), as for the gRPC socket.
    std::optional<gid_t> group;
    size_t max_connections = 8192;
    size_t max_connections_per_uid = 1024;
    absl::Duration idle_timeout = absl::Seconds(30);
  };

  // Binds, listens and starts serving. UNAVAILABLE when the socket cannot
  // be made; PERMISSION_DENIED when it cannot be given to the group or its
  // mode 0660.
  static absl::StatusOr<std::unique_ptr<MemorySocketServer>> Start(
      const Options& options, SessionRegistry* sessions, const MemoryFileTable* memory_files);
  // Stop().
  ~MemorySocketServer();
  MemorySocketServer(const MemorySocketServer&) = delete;
  MemorySocketServer& operator=(const MemorySocketServer&) = delete;

  // Stops serving, closes every connection and removes the socket file.
  // Idempotent.
  void Stop();

  const std::string& path() const { return options_.path; }

 private:
  struct Connection;

  MemorySocketServer(const Options& options, SessionRegistry* sessions,
                     const MemoryFileTable* memory_files)
      : options_(options), sessions_(sessions), memory_files_(memory_files) {}

  void Run();
  void AcceptAll();
  // Serves every request waiting on `connection`; false when it must close.
  bool ServeRequests(Connection& connection);
  // The answer to one request from `peer_uid`: the status and, when OK, the file.
  absl::StatusOr<FiledDescriptor> Answer(const std::string& payload, size_t fds, uid_t peer_uid);

  const Options options_;
  SessionRegistry* const sessions_;
  const MemoryFileTable* const memory_files_;
  LimitRefusal connections_refusal_{"memory socket connections"};
  UniqueFd listener_;
  UniqueFd epoll_;
  UniqueFd stop_event_;  // eventfd: Stop wakes the thread with it
  std::thread thread_;
  bool stopped_ = false;  // Stop's own: called from one thread (the daemon's)
};

}  // namespace gpumux
