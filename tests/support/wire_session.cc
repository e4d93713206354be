#include "tests/support/wire_session.h"

#include <unistd.h>

#include <chrono>

#include "grpc/grpc.h"

namespace gpumux::testing {
namespace {

// Keeps gRPC initialized for the rest of the process. Otherwise, when a
// test's in-process Daemon is the last gRPC user, its grpc::Server destructor
// runs grpc_shutdown, which in gRPC 1.51 may sit up to 10 s joining an
// executor thread parked in epoll_wait: a test then takes 10 s longer.
void KeepGrpcInitialized() {
  static const bool initialized = [] {
    grpc_init();
    return true;
  }();
  (void)initialized;
}

}  // namespace

WireSession::WireSession(std::shared_ptr<grpc::Channel> channel, const std::string& name,
                         const std::string& tenant)
    : session_stub_(v1::Session::NewStub(channel)),
      memory_(v1::Memory::NewStub(channel)),
      stream_stub_(v1::Stream::NewStub(channel)),
      event_(v1::Event::NewStub(channel)),
      copy_(v1::Copy::NewStub(channel)),
      comm_(v1::Comm::NewStub(channel)),
      random_(v1::Random::NewStub(channel)),
      nvtx_(v1::Nvtx::NewStub(channel)) {
  KeepGrpcInitialized();
  stream_ = session_stub_->Open(&stream_context_);
  v1::SessionClientMessage open;
  open.mutable_open()->set_client_name(name);
  open.mutable_open()->set_pid(getpid());
  open.mutable_open()->set_tenant(tenant);
  v1::SessionServerMessage reply;
  if (!stream_->Write(open) || !stream_->Read(&reply) || !reply.has_opened()) {
    open_status_ = stream_->Finish();
    if (open_status_.ok()) {
      open_status_ = grpc::Status(grpc::StatusCode::INTERNAL,
                                  "the session stream ended without an answer to Open");
    }
    closed_ = true;
    return;
  }
  id_ = reply.opened().session_id();
  secret_ = reply.opened().secret();
  credentials_ = std::to_string(id_) + ":" + secret_;
}

WireSession::~WireSession() {
  if (!closed_) Close();
}

std::unique_ptr<grpc::ClientContext> WireSession::Context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata("gpumux-session", credentials());
  return context;
}

grpc::Status WireSession::Allocate(int device, uint64_t size, v1::Allocation* out, bool shareable,
                                   uint64_t stream) {
  v1::AllocateRequest request;
  request.set_device(device);
  request.set_size(size);
  request.set_shareable(shareable);
  request.set_stream(stream);
  v1::AllocateResponse response;
  grpc::Status status = memory_->Allocate(Context().get(), request, &response);
  if (out != nullptr) *out = response.allocation();
  return status;
}

grpc::Status WireSession::Free(const std::vector<uint64_t>& ids) {
  v1::FreeRequest request;
  for (uint64_t id : ids) request.add_allocation_ids(id);
  v1::FreeResponse response;
  return memory_->Free(Context().get(), request, &response);
}

grpc::Status WireSession::Ping(int timeout_ms) {
  std::unique_ptr<grpc::ClientContext> context = Context();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  v1::PingResponse response;
  return session_stub_->Ping(context.get(), v1::PingRequest(), &response);
}

bool WireSession::ReadNotice(v1::SessionServerMessage* message) { return stream_->Read(message); }

bool WireSession::Send(const v1::SessionClientMessage& message) { return stream_->Write(message); }

grpc::Status WireSession::Close() {
  closed_ = true;
  v1::SessionClientMessage goodbye;  // a close, not a crash
  goodbye.mutable_goodbye();
  stream_->Write(goodbye);
  stream_->WritesDone();
  v1::SessionServerMessage drain;
  while (stream_->Read(&drain)) {
  }
  return stream_->Finish();
}

}  // namespace gpumux::testing
