#pragma once

// AdminSocketServer: the daemon's side of the admin socket
// (common/net/admin_socket.h). One thread accepts its connections, reads each
// peer's credentials with SO_PEERCRED (the kernel's, fixed at connect time,
// so a peer cannot change them afterwards) and hands the connection by
// descriptor to one of two gRPC servers that listen nowhere themselves:
// `operators` for a peer with uid 0 or the daemon's own effective uid,
// `others` (which answers PERMISSION_DENIED) for anyone else. The decision
// is per connection and made before gRPC reads a byte of it, so no call of a
// non-operator can reach `operators`.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "gpumux/common/unique_fd.h"
#include "grpcpp/server.h"

namespace gpumux {

class AdminSocketServer {
 public:
  struct Options {
    // The socket path (AdminSocketPath of the gRPC socket); a stale socket
    // there must be gone already.
    std::string path;
    // Owner group of the socket (mode 0660), as for the gRPC socket.
    std::optional<gid_t> group;
  };

  // Binds, listens and starts accepting. `operators` and `others` must be
  // started and outlive Stop(). UNAVAILABLE when the socket cannot be made;
  // PERMISSION_DENIED when it cannot be given to the group or mode 0660.
  static absl::StatusOr<std::unique_ptr<AdminSocketServer>> Start(const Options& options,
                                                                  grpc::Server* operators,
                                                                  grpc::Server* others);
  // Stop().
  ~AdminSocketServer();
  AdminSocketServer(const AdminSocketServer&) = delete;
  AdminSocketServer& operator=(const AdminSocketServer&) = delete;

  // Stops accepting and removes the socket file; connections already handed
  // over end with their servers' shutdown. Idempotent.
  void Stop();

  const std::string& path() const { return options_.path; }
  // Whether a peer of `uid` is served Admin: root or the daemon's own uid.
  static bool IsOperator(uid_t uid);

 private:
  AdminSocketServer(const Options& options, grpc::Server* operators, grpc::Server* others)
      : options_(options), operators_(operators), others_(others) {}

  void Run();
  void AcceptAll();

  const Options options_;
  grpc::Server* const operators_;
  grpc::Server* const others_;
  UniqueFd listener_;
  UniqueFd stop_event_;  // eventfd: Stop wakes the thread with it
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace gpumux
