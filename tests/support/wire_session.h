#pragma once

// A session opened over the raw gRPC stubs (no client library), so RPC tests
// check the wire contract itself and benchmarks measure what any client of
// the protos pays. It reports, and does not act on, a failure to open: the
// tests' RawSession (raw_session.h) adds a test failure, a benchmark exits.
// Not thread-safe for the session stream; the stubs are gRPC's (thread-safe).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpumux/v1/comm.grpc.pb.h"
#include "gpumux/v1/copy.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/nvtx.grpc.pb.h"
#include "gpumux/v1/random.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpumux::testing {

class WireSession {
 public:
  // Opens a session named `name` on `channel`; open_status() says whether it did.
  WireSession(std::shared_ptr<grpc::Channel> channel, const std::string& name,
              const std::string& tenant = "");
  // Half-closes the stream if still open: the session ends.
  ~WireSession();
  WireSession(const WireSession&) = delete;
  WireSession& operator=(const WireSession&) = delete;

  // OK once the daemon answered Open; else why the stream ended.
  const grpc::Status& open_status() const { return open_status_; }
  uint64_t id() const { return id_; }
  const std::string& secret() const { return secret_; }
  // "<id>:<secret>", the gpumux-session metadata value.
  const std::string& credentials() const { return credentials_; }
  // A context carrying this session's metadata.
  std::unique_ptr<grpc::ClientContext> Context() const;
  v1::Session::Stub& session() { return *session_stub_; }
  v1::Memory::Stub& memory() { return *memory_; }
  v1::Stream::Stub& stream() { return *stream_stub_; }
  v1::Event::Stub& event() { return *event_; }
  v1::Copy::Stub& copy() { return *copy_; }
  v1::Comm::Stub& comm() { return *comm_; }
  v1::Random::Stub& random() { return *random_; }
  v1::Nvtx::Stub& nvtx() { return *nvtx_; }

  grpc::Status Allocate(int device, uint64_t size, v1::Allocation* out, bool shareable = false,
                        uint64_t stream = 0);
  grpc::Status Free(const std::vector<uint64_t>& ids);
  // Session.Ping with this session's metadata, within `timeout_ms`.
  grpc::Status Ping(int timeout_ms = 5000);
  // Reads the next notice from the session stream; false at its end.
  bool ReadNotice(v1::SessionServerMessage* message);
  // Writes a message after `open` (an answer) on the session stream.
  bool Send(const v1::SessionClientMessage& message);
  // Half-closes and waits for the daemon to finish the stream.
  grpc::Status Close();

 private:
  std::unique_ptr<v1::Session::Stub> session_stub_;
  std::unique_ptr<v1::Memory::Stub> memory_;
  std::unique_ptr<v1::Stream::Stub> stream_stub_;
  std::unique_ptr<v1::Event::Stub> event_;
  std::unique_ptr<v1::Copy::Stub> copy_;
  std::unique_ptr<v1::Comm::Stub> comm_;
  std::unique_ptr<v1::Random::Stub> random_;
  std::unique_ptr<v1::Nvtx::Stub> nvtx_;
  grpc::ClientContext stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionClientMessage, v1::SessionServerMessage>>
      stream_;
  grpc::Status open_status_;
  uint64_t id_ = 0;
  std::string secret_;
  std::string credentials_;
  bool closed_ = false;
};

}  // namespace gpumux::testing
