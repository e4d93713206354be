#pragma once

// FuzzHarness: the one in-process gpumuxd a libFuzzer target talks to (host
// backend, 2 devices of 64 MiB, socket in a temporary directory), started on
// first use and kept for the life of the process, with a session whose live
// objects (FuzzFixture) give fuzzed ids something real to hit. Calls go out
// with the session's `gpumux-session` metadata; their results are checked
// against what must hold for any request, and a broken invariant aborts with
// the method, the status and the request bytes, which libFuzzer records as a
// crash:
// - every call returns within kCallDeadline, and its code is none of UNKNOWN,
//   INTERNAL, UNIMPLEMENTED, DATA_LOSS, nor UNAUTHENTICATED (the session's
//   credentials are valid; any other code is an answer to the request);
// - the daemon answers Session.Ping for the session after every input;
// - every $GPUMUX_FUZZ_LEAK_CHECK_EVERY inputs (default 100; 1 pins a leak
//   on the input that made it), once everything the fuzzer got
//   (allocations and imports, streams, events) is freed, the session's books
//   (Observe stats and ListSessions) are back to their baseline, and no
//   session the fuzzer opened is still listed.
// Not thread-safe: libFuzzer runs one input at a time on one thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpumux/v1/admin.grpc.pb.h"
#include "gpumux/v1/comm.grpc.pb.h"
#include "gpumux/v1/copy.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/profile.grpc.pb.h"
#include "gpumux/v1/random.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/daemon.h"

namespace gpumux::fuzz {

// The objects the harness's session holds between inputs, and the ids a
// fresh daemon gives them (the harness checks), for seed requests to name.
// An input may free or destroy them; the next leak check makes them again
// (under new ids).
struct FuzzFixture {
  static constexpr uint64_t kSession = 1;
  static constexpr int kDevices = 2;
  static constexpr uint64_t kAllocationBytes = uint64_t{1} << 20;
  static constexpr uint64_t kAllocationOnDevice0 = 1;
  static constexpr uint64_t kAllocationOnDevice1 = 2;
  static constexpr uint64_t kShareableAllocation = 3;  // on device 0
  static constexpr uint64_t kStream = 1;               // on device 0
  static constexpr uint64_t kTimingEvent = 1;          // on device 0
  static constexpr uint64_t kInterprocessEvent = 2;    // on device 0

  uint64_t allocation_on_device0 = 0;
  uint64_t allocation_on_device1 = 0;
  uint64_t shareable_allocation = 0;
  uint64_t stream = 0;
  uint64_t timing_event = 0;
  uint64_t interprocess_event = 0;
};

class FuzzHarness {
 public:
  static constexpr absl::Duration kCallDeadline = absl::Seconds(5);

  // Starts the daemon and the session on first use (aborting when it
  // cannot); the harness lives until exit, where the daemon shuts down.
  static FuzzHarness& Get();
  // Ends the session and shuts the daemon down.
  ~FuzzHarness();

  // Unary `method` ("/gpumux.v1.Memory/Allocate") with `request` as the raw
  // request bytes. Checks the status; `*response` gets the reply's bytes.
  grpc::Status CallRaw(const std::string& method, absl::string_view request, std::string* response);
  // The session stream with `messages` as raw bytes (one message each),
  // half-closed after them and read to its end. Checks the status.
  grpc::Status OpenRaw(const std::vector<std::string>& messages);
  // The session's "<id>:<secret>" and the daemon's gRPC socket path.
  const std::string& credentials() const { return session_metadata_; }
  const std::string& socket_path() const { return daemon_->socket_path(); }
  // A context with the session's metadata and kCallDeadline.
  std::unique_ptr<grpc::ClientContext> Context() const;
  // Prints `what` and aborts: libFuzzer saves the input as a crash.
  [[noreturn]] static void Fail(absl::string_view what);
  // Aborts unless `status` keeps the invariants above, naming `call` and
  // showing `request`.
  void CheckStatus(absl::string_view call, const grpc::Status& status,
                   absl::string_view request) const;

  // The service's typed stub on the harness's channel (one per process, as
  // the harness).
  // gpumux.v1.Admin's is on the admin socket, as the daemon serves it.
  template <typename Service>
  typename Service::Stub& Stub() {
    static const std::unique_ptr<typename Service::Stub> stub =
        Service::NewStub(ChannelFor(absl::StrCat("/", Service::service_full_name(), "/")));
    return *stub;
  }

  // Remembers what a reply handed the session, for the leak check to free.
  void Track(const v1::AllocateResponse& response) {
    allocations_.push_back(response.allocation().allocation_id());
  }
  void Track(const v1::ImportResponse& response) {
    allocations_.push_back(response.allocation().allocation_id());
  }
  void Track(const v1::CreateStreamResponse& response);
  void Track(const v1::CreateEventResponse& response) { TrackEvent(response.event()); }
  void Track(const v1::CopyResponse& response) { TrackEvent(response.event()); }
  void Track(const v1::DeviceToHostResponse& response) { TrackEvent(response.event()); }
  void Track(const v1::GenerateResponse& response) { TrackEvent(response.event()); }
  // A collective's new allocations and its completion event.
  void Track(const v1::CommResponse& response) {
    for (const v1::CommResult& result : response.results()) {
      if (result.has_allocation()) allocations_.push_back(result.allocation().allocation_id());
    }
    TrackEvent(response.event());
  }
  // A profile the session owns until it finishes it.
  void Track(const v1::StartProfileResponse& response) {
    profiles_.push_back(response.profile_id());
  }
  void Track(const google::protobuf::Message&) {}  // the other replies hand out nothing

  // After each input: the daemon answers Ping, and every so many inputs
  // the leak check runs.
  void FinishInput();

 private:
  FuzzHarness();

  void TrackEvent(uint64_t event);
  // The admin socket's channel for a method of gpumux.v1.Admin ("/gpumux.v1.
  // Admin/..."), the main socket's for any other.
  const std::shared_ptr<grpc::Channel>& ChannelFor(absl::string_view method) const;
  // Makes whatever fixture object is gone (all of them at first).
  void MakeFixture();
  // Frees what the fuzzer got, resets the session's limits, remakes the
  // fixture and compares the books with the baseline.
  void CheckForLeaks();
  // Lets every device finish its queued work, then allocates and frees a
  // block on each, so the allocator processes the events of frees that
  // waited on that work (PyTorch keeps such a block's requested bytes until
  // then, as malloc's process_events retires it).
  void Settle();
  // The session's stats and usage per device, its streams and events, and
  // the sessions listed, as text.
  std::string ReadBooks();
  // A harness call that must succeed (or be NOT_FOUND when `may_be_gone`).
  void Expect(absl::string_view what, const grpc::Status& status, bool may_be_gone = false) const;

  std::string dir_;
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<grpc::Channel> admin_channel_;
  grpc::ClientContext session_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionClientMessage, v1::SessionServerMessage>>
      session_stream_;
  uint64_t session_id_ = 0;
  std::string session_metadata_;
  FuzzFixture fixture_;
  std::string baseline_;
  std::vector<uint64_t> allocations_;
  std::vector<v1::StreamRef> streams_;
  std::vector<uint64_t> events_;
  std::vector<uint64_t> profiles_;
  int leak_check_interval_ = 100;  // inputs between leak checks
  int inputs_since_check_ = 0;
};

}  // namespace gpumux::fuzz
