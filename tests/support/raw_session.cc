#include "tests/support/raw_session.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/memory_socket.h"
#include "grpc/grpc.h"
#include "gtest/gtest.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {

TempDir::TempDir() {
  char pattern[] = "/tmp/gpumux-test-XXXXXX";
  char* made = mkdtemp(pattern);
  if (made == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return;
  }
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

namespace {

// Keeps gRPC initialized for the rest of the test process. Otherwise, when a
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

RawSession::RawSession(std::shared_ptr<grpc::Channel> channel, const std::string& name, const std::string& tenant)
    : session_stub_(v1::Session::NewStub(channel)),
      memory_(v1::Memory::NewStub(channel)),
      stream_stub_(v1::Stream::NewStub(channel)),
      event_(v1::Event::NewStub(channel)),
      copy_(v1::Copy::NewStub(channel)),
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
    ADD_FAILURE() << "cannot open a session: " << stream_->Finish().error_message();
    closed_ = true;
    return;
  }
  id_ = reply.opened().session_id();
  secret_ = reply.opened().secret();
}

RawSession::~RawSession() {
  if (!closed_) Close();
}

std::unique_ptr<grpc::ClientContext> RawSession::Context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata("gpumux-session", std::to_string(id_) + ":" + secret_);
  return context;
}

grpc::Status RawSession::Allocate(int device, uint64_t size, v1::Allocation* out, bool shareable,
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

absl::StatusOr<SealedMemory> FetchMemory(const RawSession& session, const std::string& socket_path,
                                         const std::string& key, uint64_t size) {
  MemoryFileFetcher fetcher(MemorySocketPath(socket_path), session.credentials());
  return fetcher.Fetch(key, size);
}

grpc::Status RawSession::Free(const std::vector<uint64_t>& ids) {
  v1::FreeRequest request;
  for (uint64_t id : ids) request.add_allocation_ids(id);
  v1::FreeResponse response;
  return memory_->Free(Context().get(), request, &response);
}

grpc::Status RawSession::Ping(int timeout_ms) {
  std::unique_ptr<grpc::ClientContext> context = Context();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  v1::PingResponse response;
  return session_stub_->Ping(context.get(), v1::PingRequest(), &response);
}

bool RawSession::ReadNotice(v1::SessionServerMessage* message) { return stream_->Read(message); }

grpc::Status RawSession::Close() {
  closed_ = true;
  stream_->WritesDone();
  v1::SessionServerMessage drain;
  while (stream_->Read(&drain)) {
  }
  return stream_->Finish();
}

DaemonProcess::DaemonProcess(const std::vector<std::string>& args) {
  socket_ = dir_.path() + "/gpumux.sock";
  std::vector<std::string> argv_storage = {TestBinary(std::string(GPUMUX_BINARY_DIR) + "/server/gpumuxd"),
                                           "--socket=" + socket_, "--log-level=warn"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Connect only once the socket exists: a failed first attempt would put
  // the channel into gRPC's reconnect backoff (a second or more).
  // 30 s: a CUDA daemon creates its contexts and loads its kernels first.
  auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(socket_) && std::chrono::system_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  channel_ = grpc::CreateChannel("unix://" + socket_, grpc::InsecureChannelCredentials());
  if (!channel_->WaitForConnected(deadline)) ADD_FAILURE() << "gpumuxd did not start on " << socket_;
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

DaemonProcess::~DaemonProcess() { Stop(); }

}  // namespace gpumux::testing
