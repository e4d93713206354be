#pragma once

// The session's long-lived Session.Open stream (DESIGN §5): sends
// OpenSessionRequest, waits for SessionOpened, then reads the daemon's notices
// on a thread of its own until the stream ends. Half-closing it ends the
// session, and the daemon releases everything the session still holds.
// Thread-safe.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"

namespace gpumux {

class SessionStream {
 public:
  // Called on the reader thread for every message after SessionOpened.
  using NoticeHandler = std::function<void(const v1::SessionServerMessage&)>;

  // Opens the stream on `stub` and waits until `deadline` for SessionOpened.
  // Errors: those of FromGrpcStatus (UNAVAILABLE "cannot reach gpumuxd at
  // <address>: …" when the daemon cannot be reached) and the daemon's refusal;
  // DEADLINE_EXCEEDED when no SessionOpened arrives in time; INTERNAL when the
  // daemon answers with something else or ends the stream without a status.
  static absl::StatusOr<std::unique_ptr<SessionStream>> Open(v1::Session::Stub& stub,
                                                             const v1::OpenSessionRequest& request,
                                                             absl::Time deadline,
                                                             std::string address,
                                                             NoticeHandler on_notice);

  // Close().
  ~SessionStream();
  SessionStream(const SessionStream&) = delete;
  SessionStream& operator=(const SessionStream&) = delete;

  const v1::SessionOpened& opened() const { return opened_; }

  // True once the daemon ended the stream or it broke (daemon gone).
  bool ended() const;
  // Waits up to `timeout` for ended(); returns it.
  bool AwaitEnded(absl::Duration timeout) const;

  // Sends a message after `open` (an answer to the daemon's question);
  // false when the stream is closing or broken. Safe from any thread,
  // including the notice handler.
  bool Send(const v1::SessionClientMessage& message);

  // Half-closes the stream (which ends the session), waits up to `timeout`
  // for the daemon to end it, cancelling otherwise, and returns the final
  // status. Idempotent; later calls return the first result.
  absl::Status Close(absl::Duration timeout = absl::Seconds(2));
  // Close(timeout), then the daemon's final status as it came, before
  // FromGrpcStatus phrased it (the reason an operator's kill gave).
  grpc::Status FinalGrpcStatus(absl::Duration timeout = absl::Seconds(2));

 private:
  enum class State { kOpening, kOpen, kEnded };

  SessionStream(std::string address, NoticeHandler on_notice);
  void ReadLoop();
  bool LeftOpening() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ != State::kOpening; }
  bool HasEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ == State::kEnded; }
  void SetState(State state) ABSL_LOCKS_EXCLUDED(mu_);
  // For Open's failures: cancels the call unless the daemon ended it, joins
  // the reader, reaps the call and marks the stream closed.
  grpc::Status Abandon(bool cancel);

  const std::string address_;
  const NoticeHandler on_notice_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionClientMessage, v1::SessionServerMessage>>
      stream_;
  // Written by the reader before it leaves kOpening, read-only afterwards.
  v1::SessionOpened opened_;
  std::thread reader_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kOpening;
  // state_ == kEnded, readable without mu_: every local allocation asks.
  std::atomic<bool> ended_{false};
  // Set when the first message was not SessionOpened.
  bool unexpected_first_message_ ABSL_GUARDED_BY(mu_) = false;

  // Serializes writes after `open` with the half-close.
  absl::Mutex write_mu_;
  bool writes_done_ ABSL_GUARDED_BY(write_mu_) = false;

  absl::Mutex close_mu_;
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(close_mu_);
  grpc::Status final_status_ ABSL_GUARDED_BY(close_mu_);
};

}  // namespace gpumux
