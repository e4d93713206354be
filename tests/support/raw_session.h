#pragma once

// Test support: a session opened over raw gRPC stubs (no client library), so
// RPC tests check the wire contract itself (wire_session.h, with a test
// failure when it cannot open); and a gpumuxd child process.

#include <sys/resource.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpumux/common/sealed_memory.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/support/wire_session.h"

namespace gpumux::testing {

// A temporary directory removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The memory file under `key` fetched for `session` from the memory socket
// next to the daemon's socket at `socket_path`, checked to be `size` bytes.
absl::StatusOr<SealedMemory> FetchMemory(const WireSession& session, const std::string& socket_path,
                                         const std::string& key, uint64_t size);

// A WireSession whose failure to open is a test failure (ADD_FAILURE).
class RawSession : public WireSession {
 public:
  RawSession(std::shared_ptr<grpc::Channel> channel, const std::string& name,
             const std::string& tenant = "");
};

// gpumuxd as a child process; SIGTERM and reaped on destruction.
class DaemonProcess {
 public:
  // Starts GPUMUX_BINARY_DIR/server/gpumuxd with `args` plus --socket in a
  // temporary directory, and waits until it answers.
  explicit DaemonProcess(const std::vector<std::string>& args);
  // The same with the child's RLIMIT_NOFILE at `descriptor_limit`, soft and
  // hard.
  DaemonProcess(const std::vector<std::string>& args, rlim_t descriptor_limit);
  ~DaemonProcess();

  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return socket_; }
  std::string address() const { return "unix://" + socket_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  // SIGTERM, then the exit status (as waitpid reports it).
  int Stop();

 private:
  TempDir dir_;
  std::string socket_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace gpumux::testing
