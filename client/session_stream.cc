#include "client/session_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/grpc_status.h"

namespace gpumux {

SessionStream::SessionStream(std::string address, NoticeHandler on_notice)
    : address_(std::move(address)), on_notice_(std::move(on_notice)) {}

absl::StatusOr<std::unique_ptr<SessionStream>> SessionStream::Open(
    v1::Session::Stub& stub, const v1::OpenSessionRequest& request, absl::Time deadline,
    std::string address, NoticeHandler on_notice) {
  std::unique_ptr<SessionStream> stream(
      new SessionStream(std::move(address), std::move(on_notice)));
  stream->stream_ = stub.Open(&stream->context_);
  v1::SessionClientMessage open;
  *open.mutable_open() = request;
  if (!stream->stream_->Write(open)) {
    // The call failed before the daemon saw it (typically: no daemon there);
    // Finish says why.
    return FromGrpcStatus(stream->Abandon(/*cancel=*/false), stream->address_);
  }
  stream->reader_ = std::thread([s = stream.get()] { s->ReadLoop(); });

  State state;
  bool unexpected;
  {
    absl::MutexLock lock(&stream->mu_);
    stream->mu_.AwaitWithDeadline(absl::Condition(stream.get(), &SessionStream::LeftOpening),
                                  deadline);
    state = stream->state_;
    unexpected = stream->unexpected_first_message_;
  }
  if (state == State::kOpen) return stream;
  if (state == State::kOpening) {
    stream->Abandon(/*cancel=*/true);
    return absl::DeadlineExceededError(
        absl::StrCat("gpumuxd at ", stream->address_, " did not open a session in time"));
  }
  if (unexpected) {
    stream->Abandon(/*cancel=*/true);
    return absl::InternalError(absl::StrCat("gpumuxd at ", stream->address_,
                                            " answered OpenSession with something other than "
                                            "SessionOpened"));
  }
  grpc::Status status = stream->Abandon(/*cancel=*/false);
  if (!status.ok()) return FromGrpcStatus(status, stream->address_);
  return absl::InternalError(absl::StrCat("gpumuxd at ", stream->address_,
                                          " ended the session stream without opening a session"));
}

SessionStream::~SessionStream() { Close().IgnoreError(); }

bool SessionStream::ended() const { return ended_.load(std::memory_order_acquire); }

bool SessionStream::AwaitEnded(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &SessionStream::HasEnded), timeout);
}

grpc::Status SessionStream::FinalGrpcStatus(absl::Duration timeout) {
  Close(timeout).IgnoreError();
  absl::MutexLock close_lock(&close_mu_);
  return final_status_;
}

absl::Status SessionStream::Close(absl::Duration timeout) {
  absl::MutexLock close_lock(&close_mu_);
  if (closed_) return close_status_;
  closed_ = true;
  {
    absl::MutexLock lock(&write_mu_);
    writes_done_ = true;
    // The daemon counts the end as closed, not crashed. False when the
    // stream is already broken; Finish below says why.
    v1::SessionClientMessage goodbye;
    goodbye.mutable_goodbye();
    stream_->Write(goodbye);
    stream_->WritesDone();
  }
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    ended = mu_.AwaitWithTimeout(absl::Condition(this, &SessionStream::HasEnded), timeout);
  }
  // A daemon that ignores the half-close must not hang our destructor.
  if (!ended) context_.TryCancel();
  reader_.join();
  final_status_ = stream_->Finish();
  close_status_ = FromGrpcStatus(final_status_, address_);
  return close_status_;
}

bool SessionStream::Send(const v1::SessionClientMessage& message) {
  absl::MutexLock lock(&write_mu_);
  if (writes_done_) return false;
  return stream_->Write(message);
}

void SessionStream::SetState(State state) {
  absl::MutexLock lock(&mu_);
  state_ = state;
  if (state == State::kEnded) ended_.store(true, std::memory_order_release);
}

grpc::Status SessionStream::Abandon(bool cancel) {
  absl::MutexLock close_lock(&close_mu_);
  closed_ = true;
  if (cancel) context_.TryCancel();
  if (reader_.joinable()) reader_.join();
  grpc::Status status = stream_->Finish();
  final_status_ = status;
  close_status_ = FromGrpcStatus(status, address_);
  return status;
}

void SessionStream::ReadLoop() {
  v1::SessionServerMessage message;
  if (!stream_->Read(&message)) {
    SetState(State::kEnded);
    return;
  }
  if (!message.has_opened()) {
    absl::MutexLock lock(&mu_);
    unexpected_first_message_ = true;
    state_ = State::kEnded;
    ended_.store(true, std::memory_order_release);
    return;
  }
  // Published by the state change below; never written again.
  opened_ = message.opened();
  SetState(State::kOpen);
  while (stream_->Read(&message)) on_notice_(message);
  SetState(State::kEnded);
}

}  // namespace gpumux
