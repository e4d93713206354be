#include "tests/support/raw_session.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/ipc/memory_socket.h"
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

RawSession::RawSession(std::shared_ptr<grpc::Channel> channel, const std::string& name,
                       const std::string& tenant)
    : WireSession(std::move(channel), name, tenant) {
  if (!open_status().ok())
    ADD_FAILURE() << "cannot open a session: " << open_status().error_message();
}

absl::StatusOr<SealedMemory> FetchMemory(const WireSession& session, const std::string& socket_path,
                                         const std::string& key, uint64_t size) {
  MemoryFileFetcher fetcher(MemorySocketPath(socket_path), session.credentials());
  return fetcher.Fetch(key, size);
}

DaemonProcess::DaemonProcess(const std::vector<std::string>& args)
    : DaemonProcess(args, RLIM_INFINITY) {}

DaemonProcess::DaemonProcess(const std::vector<std::string>& args, rlim_t descriptor_limit) {
  socket_ = dir_.path() + "/gpumux.sock";
  std::vector<std::string> argv_storage = {
      TestBinary(std::string(GPUMUX_BINARY_DIR) + "/server/gpumuxd"), "--socket=" + socket_,
      "--log-level=warn"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    if (descriptor_limit != RLIM_INFINITY) {
      const rlimit limit{descriptor_limit, descriptor_limit};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(126);
    }
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
  if (!channel_->WaitForConnected(deadline))
    ADD_FAILURE() << "gpumuxd did not start on " << socket_;
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
