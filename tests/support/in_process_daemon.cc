#include "tests/support/in_process_daemon.h"

#include <stdlib.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace gpumux::testing {

InProcessDaemon::InProcessDaemon(Options options) : options_(options) {
  // gRPC shuts its library down whenever its last object goes, i.e. after
  // every test here; under load that shutdown sometimes waits ~10 s for an
  // executor thread parked in a poll. One reference held for the life of the
  // process keeps it initialized between tests (and the process exits
  // without the wait).
  [[maybe_unused]] static const bool grpc_initialized = [] {
    grpc_init();
    return true;
  }();
  char dir_template[] = "/tmp/gpumux-client-test-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return;
  }
  dir_ = dir_template;
  socket_path_ = dir_ + "/gpumux.sock";
  Start();
  observe_ =
      v1::Observe::NewStub(grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
}

void InProcessDaemon::Start() {
  Daemon::Options daemon_options;
  daemon_options.socket_path = socket_path_;
  daemon_options.backend = "host";
  daemon_options.host_devices = options_.devices;
  daemon_options.host_device_memory = options_.device_memory;
  daemon_options.metrics_listen_address = options_.metrics_listen;
  daemon_options.allocator_conf = options_.allocator_conf;
  if (options_.profile_memory != 0) daemon_options.profile_memory = options_.profile_memory;
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(daemon_options);
  if (!daemon.ok()) {
    ADD_FAILURE() << "cannot start the daemon: " << daemon.status();
    return;
  }
  daemon_ = std::move(daemon).value();
}

void InProcessDaemon::Restart() {
  Shutdown();
  daemon_.reset();
  Start();
}

InProcessDaemon::~InProcessDaemon() {
  // Our own channel goes first, so shutting down waits for no idle connection of ours.
  observe_.reset();
  Shutdown();
  daemon_.reset();
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

void InProcessDaemon::Shutdown() {
  if (daemon_ != nullptr) daemon_->Shutdown();
}

std::vector<v1::SessionInfo> InProcessDaemon::Sessions() const {
  if (observe_ == nullptr) {
    ADD_FAILURE() << "the daemon is not running";
    return {};
  }
  grpc::ClientContext context;
  v1::ListSessionsResponse response;
  grpc::Status status = observe_->ListSessions(&context, v1::ListSessionsRequest(), &response);
  if (!status.ok()) {
    ADD_FAILURE() << "Observe.ListSessions failed: " << status.error_message();
    return {};
  }
  return {response.sessions().begin(), response.sessions().end()};
}

std::optional<v1::SessionInfo> InProcessDaemon::Session(SessionId id) const {
  for (v1::SessionInfo& session : Sessions()) {
    if (session.session_id() == id.value()) return std::move(session);
  }
  return std::nullopt;
}

std::optional<uint64_t> InProcessDaemon::LiveAllocations(SessionId id) const {
  std::optional<v1::SessionInfo> session = Session(id);
  if (!session.has_value()) return std::nullopt;
  uint64_t allocations = 0;
  for (const v1::SessionDeviceUsage& usage : session->devices()) allocations += usage.allocations();
  return allocations;
}

}  // namespace gpumux::testing
