#pragma once

// A scripted stand-in for gpumuxd, for testing the client library and CLI
// without the real daemon: the Session, Device, Memory and Observe services
// on a Unix socket in a fresh temporary directory, with a toy bump allocator
// over real POSIX shared-memory segments (2 MiB each, blocks rounded to 512
// bytes, shareable allocations in a segment of their own). It records what
// clients sent so tests can assert on the wire traffic, and lets tests push
// notices and misbehave. Thread-safe.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/v1/session.pb.h"
#include "grpcpp/server.h"

namespace gpumux::testing {

class FakeDaemon {
 public:
  static constexpr uint64_t kSegmentSize = uint64_t{2} << 20;
  // Allocations above this are RESOURCE_EXHAUSTED.
  static constexpr uint64_t kDeviceMemory = uint64_t{1} << 30;
  static constexpr int kDeviceCount = 2;
  static constexpr char kSecret[] = "s3cret";

  struct Options {
    // False: read OpenSessionRequest and never answer it.
    bool send_opened = true;
    // Hand out CUDA IPC handles instead of shared-memory names.
    bool cuda_handles = false;
    // Refuse every session with RESOURCE_EXHAUSTED "too many sessions".
    bool refuse_sessions = false;
  };

  // Serving when this returns; aborts the test on failure.
  explicit FakeDaemon(Options options);
  FakeDaemon() : FakeDaemon(Options()) {}
  // Shutdown(), then removes the socket and every shared-memory object.
  ~FakeDaemon();

  // "unix:///…/gpumuxd.sock" and the bare socket path.
  std::string address() const { return "unix://" + socket_path_; }
  const std::string& socket_path() const { return socket_path_; }

  // Stops serving; open session streams are cancelled (the daemon "dies").
  void Shutdown();

  // Writes SegmentReleased to every open session stream.
  void SendSegmentReleased(int32_t device, uint64_t segment_id);

  // Bytes of a live allocation, read through the daemon's own mapping.
  std::string ReadAllocation(uint64_t allocation_id, size_t length);
  // Writes into a live allocation through the daemon's own mapping.
  void WriteAllocation(uint64_t allocation_id, const std::string& bytes);

  // What clients sent.
  std::vector<v1::OpenSessionRequest> open_requests() const;
  // Each Free RPC's ids, in arrival order.
  std::vector<std::vector<uint64_t>> free_calls() const;
  // Each Allocate RPC's free_allocation_ids, in arrival order.
  std::vector<std::vector<uint64_t>> allocate_carried_frees() const;
  // Session-bound calls that lacked the gpumux-session metadata or had it wrong.
  int unauthenticated_calls() const;
  // SetMemoryLimit requests as received.
  std::vector<std::string> memory_limit_requests() const;
  int live_allocations() const;
  int sessions_open() const;
  int sessions_closed_cleanly() const;

  class State;

 private:
  std::string dir_;
  std::string socket_path_;
  std::unique_ptr<State> state_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace gpumux::testing
