#include "server/rpc/session_service.h"

#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/profile_records.h"
#include "server/core/notice_sink.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/session_auth.h"
#include "server/rpc/session_proto.h"

namespace gpumux {
namespace {

// CMake's PROJECT_VERSION (server/rpc/CMakeLists.txt).
constexpr char kDaemonVersion[] = GPUMUX_VERSION;
// Its commit, build type and compiler (the top-level CMakeLists.txt).
constexpr char kDaemonBuild[] = GPUMUX_BUILD;

// Queues server messages on one stream: one write in flight at a time, as
// gRPC requires; Finish waits for the write in flight.
class SessionReactor final
    : public grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>,
      public std::enable_shared_from_this<SessionReactor> {
 public:
  // `daemon` (the daemon's facts every SessionOpened carries) must outlive it.
  SessionReactor(SessionLifecycle* lifecycle, ClientQueries* queries, DeviceProfiler* profiler,
                 const v1::SessionOpened* daemon)
      : lifecycle_(lifecycle), queries_(queries), profiler_(profiler), daemon_(daemon) {}

  void Begin(std::shared_ptr<SessionReactor> self) {
    self_ = std::move(self);
    StartRead(&request_);
  }

  // Called by the notice sink from any thread.
  void Send(v1::SessionServerMessage message) {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    queue_.push_back(std::move(message));
    if (!writing_) StartNextWriteLocked();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (!HasSession()) {
        // gRPC reports bytes that do not parse as a failed read, like a
        // half-close: either way no `open` came.
        EndSession(SessionEndReason::kProtocolError, "protocol error",
                   grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "the session stream ended before a parseable `open` message: "
                                "its first message must be a SessionClientMessage with `open`"));
        return;
      }
      // Half-close by the client or a broken stream: the session's life
      // ends. The two look alike here; a client that closes says goodbye
      // first.
      bool goodbye;
      {
        absl::MutexLock lock(&mu_);
        goodbye = goodbye_;
      }
      if (goodbye) {
        EndSession(SessionEndReason::kClosed, "client closed the session stream", grpc::Status::OK);
      } else {
        EndSession(SessionEndReason::kCrashed, "session stream ended without goodbye (client gone)",
                   grpc::Status::OK);
      }
      return;
    }
    if (std::optional<SessionId> session = OpenSession(); session.has_value()) {
      if (!TakeAnswer(*session)) {
        EndSession(SessionEndReason::kProtocolError, "protocol error",
                   grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                "the session is already open; the stream takes only answers to "
                                "the daemon's questions (cache_released, lease_blocks, "
                                "host_profile) and goodbye"));
        return;
      }
      StartRead(&request_);
      return;
    }
    if (!request_.has_open()) {
      EndSession(SessionEndReason::kProtocolError, "protocol error",
                 grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "the first message on a session stream must be `open`"));
      return;
    }
    absl::StatusOr<OpenedSession> opened = lifecycle_->Open(
        FromProto(request_.open()), std::make_shared<Sink>(self_), request_.open().profile_token());
    if (!opened.ok()) {
      EndSession(SessionEndReason::kClosed, "open refused", ToGrpcStatus(opened.status()));
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      session_ = opened->info.id;
    }
    v1::SessionServerMessage reply;
    v1::SessionOpened* msg = reply.mutable_opened();
    *msg = *daemon_;
    ToProto(*opened, msg);
    Send(std::move(reply));
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      queue_.clear();
    } else if (!queue_.empty()) {
      queue_.pop_front();
    }
    if (finishing_) {
      if (!finished_) {
        finished_ = true;
        Finish(finish_status_);
      }
      return;
    }
    if (!queue_.empty()) StartNextWriteLocked();
  }

  void OnCancel() override {
    bool goodbye;
    {
      absl::MutexLock lock(&mu_);
      goodbye = goodbye_;
    }
    // A client that said goodbye and then cancelled (a deadline on its
    // close) still closed its session.
    EndSession(goodbye ? SessionEndReason::kClosed : SessionEndReason::kCrashed,
               goodbye ? "session stream cancelled after goodbye"
                       : "session stream cancelled (client gone)",
               grpc::Status::CANCELLED);
  }

  void OnDone() override {
    CloseSessionOnce(SessionEndReason::kClosed, "session stream done");
    self_.reset();  // may delete this
  }

 private:
  class Sink final : public NoticeSink {
   public:
    explicit Sink(std::weak_ptr<SessionReactor> reactor) : reactor_(std::move(reactor)) {}
    void SegmentReleased(DeviceIndex device, SegmentId segment, uint64_t offset,
                         uint64_t size) override {
      if (auto reactor = reactor_.lock()) {
        reactor->Send(SegmentReleasedMessage(device, segment, offset, size));
      }
    }
    void AskReleaseCached(uint64_t request, DeviceIndex device) override {
      if (auto reactor = reactor_.lock()) reactor->Send(ReleaseCachedMessage(request, device));
    }
    void AskLeaseBlocks(uint64_t request) override {
      if (auto reactor = reactor_.lock()) reactor->Send(BlocksRequestMessage(request));
    }
    void StartProfiling(uint64_t window, uint64_t capacity) override {
      if (auto reactor = reactor_.lock()) reactor->Send(StartProfilingMessage(window, capacity));
    }
    void StopProfiling(uint64_t window) override {
      if (auto reactor = reactor_.lock()) reactor->Send(StopProfilingMessage(window));
    }
    void Terminate(SessionEndReason reason, absl::string_view message) override {
      if (auto reactor = reactor_.lock()) {
        reactor->EndSession(reason, message,
                            grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(message)));
      }
    }

   private:
    std::weak_ptr<SessionReactor> reactor_;
  };

  bool HasSession() { return OpenSession().has_value(); }
  std::optional<SessionId> OpenSession() {
    absl::MutexLock lock(&mu_);
    return session_;
  }

  // Hands an answer in request_ to the queries, or notes a goodbye; false
  // for any other message.
  bool TakeAnswer(SessionId session) {
    switch (request_.kind_case()) {
      case v1::SessionClientMessage::kGoodbye: {
        absl::MutexLock lock(&mu_);
        goodbye_ = true;
        return true;
      }
      case v1::SessionClientMessage::kCacheReleased:
        queries_->OnCacheReleased(session, request_.cache_released().request_id());
        return true;
      case v1::SessionClientMessage::kLeaseBlocks: {
        const v1::LeaseBlocks& answer = request_.lease_blocks();
        queries_->OnLeaseBlocks(session, answer.request_id(), FromProto(answer), answer.last());
        return true;
      }
      case v1::SessionClientMessage::kHostProfile:
        if (profiler_ != nullptr) {
          profiler_->OnHostProfile(session, request_.host_profile().window_id(),
                                   FromProto(request_.host_profile().records()));
        }
        return true;
      default:
        return false;
    }
  }

  void StartNextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    StartWrite(&queue_.front());
  }

  void CloseSessionOnce(SessionEndReason reason, absl::string_view detail) {
    std::optional<SessionId> session;
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      session = session_;
    }
    if (!session.has_value()) return;
    lifecycle_->Close(*session, reason, detail);
    // After its leases are back: an allocation waiting on its answer retries
    // with them.
    queries_->OnSessionClosed(*session);
  }

  void EndSession(SessionEndReason reason, absl::string_view detail, grpc::Status status) {
    CloseSessionOnce(reason, detail);
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    finishing_ = true;
    finish_status_ = std::move(status);
    if (!writing_) {
      finished_ = true;
      Finish(finish_status_);
    }
  }

  SessionLifecycle* lifecycle_;
  ClientQueries* queries_;
  DeviceProfiler* profiler_;
  const v1::SessionOpened* daemon_;
  std::shared_ptr<SessionReactor> self_;  // keeps this alive until OnDone
  v1::SessionClientMessage request_;
  absl::Mutex mu_;
  std::optional<SessionId> session_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::SessionServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool goodbye_ ABSL_GUARDED_BY(mu_) = false;  // the client said it closes
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

SessionService::SessionService(SessionLifecycle* lifecycle, const SessionRegistry* sessions,
                               ClientQueries* queries, absl::string_view backend_name,
                               absl::string_view allocator_conf, DeviceProfiler* profiler)
    : lifecycle_(lifecycle), sessions_(sessions), queries_(queries), profiler_(profiler) {
  daemon_.set_backend(std::string(backend_name));
  daemon_.set_daemon_version(kDaemonVersion);
  daemon_.set_daemon_build(kDaemonBuild);
  daemon_.set_allocator_conf(std::string(allocator_conf));
}

grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>* SessionService::Open(
    grpc::CallbackServerContext* /*context*/) {
  auto reactor = std::make_shared<SessionReactor>(lifecycle_, queries_, profiler_, &daemon_);
  SessionReactor* raw = reactor.get();
  raw->Begin(std::move(reactor));
  return raw;
}

grpc::ServerUnaryReactor* SessionService::Ping(grpc::CallbackServerContext* context,
                                               const v1::PingRequest* /*request*/,
                                               v1::PingResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<SessionId> session = AuthenticateCall(*context, *sessions_);
  if (session.ok()) response->set_session_id(session->value());
  reactor->Finish(ToGrpcStatus(session.status()));
  return reactor;
}

}  // namespace gpumux
