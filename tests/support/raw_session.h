#pragma once

// Test support: a session opened over raw gRPC stubs (no client library), so
// RPC tests check the wire contract itself; and a gpumuxd child process.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sealed_memory.h"
#include "gpumux/v1/copy.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/nvtx.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gpumux/v1/random.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "grpcpp/grpcpp.h"

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

class RawSession;

// The memory file under `key` fetched for `session` from the memory socket
// next to the daemon's socket at `socket_path`, checked to be `size` bytes.
absl::StatusOr<SealedMemory> FetchMemory(const RawSession& session, const std::string& socket_path,
                                         const std::string& key, uint64_t size);

class RawSession {
 public:
  // Opens a session on `channel`; the test fails (ADD_FAILURE) if it cannot.
  RawSession(std::shared_ptr<grpc::Channel> channel, const std::string& name, const std::string& tenant = "");
  // Half-closes the stream if still open: the session ends.
  ~RawSession();

  uint64_t id() const { return id_; }
  const std::string& secret() const { return secret_; }
  // "<id>:<secret>", the gpumux-session metadata value.
  std::string credentials() const { return std::to_string(id_) + ":" + secret_; }
  // A context carrying this session's metadata.
  std::unique_ptr<grpc::ClientContext> Context() const;
  v1::Memory::Stub& memory() { return *memory_; }
  v1::Stream::Stub& stream() { return *stream_stub_; }
  v1::Event::Stub& event() { return *event_; }
  v1::Copy::Stub& copy() { return *copy_; }
  v1::Random::Stub& random() { return *random_; }
  v1::Nvtx::Stub& nvtx() { return *nvtx_; }

  grpc::Status Allocate(int device, uint64_t size, v1::Allocation* out, bool shareable = false,
                        uint64_t stream = 0);
  grpc::Status Free(const std::vector<uint64_t>& ids);
  // Session.Ping with this session's metadata, within `timeout_ms`.
  grpc::Status Ping(int timeout_ms = 5000);
  // Reads the next notice from the session stream; false at its end.
  bool ReadNotice(v1::SessionServerMessage* message);
  // Half-closes and waits for the daemon to finish the stream.
  grpc::Status Close();

 private:
  std::unique_ptr<v1::Session::Stub> session_stub_;
  std::unique_ptr<v1::Memory::Stub> memory_;
  std::unique_ptr<v1::Stream::Stub> stream_stub_;
  std::unique_ptr<v1::Event::Stub> event_;
  std::unique_ptr<v1::Copy::Stub> copy_;
  std::unique_ptr<v1::Random::Stub> random_;
  std::unique_ptr<v1::Nvtx::Stub> nvtx_;
  grpc::ClientContext stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionClientMessage, v1::SessionServerMessage>> stream_;
  uint64_t id_ = 0;
  std::string secret_;
  bool closed_ = false;
};

// gpumuxd as a child process; SIGTERM and reaped on destruction.
class DaemonProcess {
 public:
  // Starts GPUMUX_BINARY_DIR/server/gpumuxd with `args` plus --socket in a
  // temporary directory, and waits until it answers.
  explicit DaemonProcess(const std::vector<std::string>& args);
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
