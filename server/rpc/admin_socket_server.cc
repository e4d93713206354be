#include "server/rpc/admin_socket_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpumux/common/sealed_memory.h"
#include "grpcpp/server_posix.h"
#include "server/rpc/unix_listener.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr int kListenBacklog = 64;

}  // namespace

bool AdminSocketServer::IsOperator(uid_t uid) { return uid == 0 || uid == geteuid(); }

absl::StatusOr<std::unique_ptr<AdminSocketServer>> AdminSocketServer::Start(const Options& options,
                                                                            grpc::Server* operators,
                                                                            grpc::Server* others) {
  auto server =
      std::unique_ptr<AdminSocketServer>(new AdminSocketServer(options, operators, others));
  absl::StatusOr<UniqueFd> listener =
      ListenOnUnixSocket("admin socket", options.path, SOCK_STREAM, options.group, kListenBacklog);
  if (!listener.ok()) return listener.status();
  server->listener_ = *std::move(listener);
  server->stop_event_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!server->stop_event_.valid()) {
    const int error = errno;
    unlink(options.path.c_str());
    return SystemCallError(error, "eventfd");
  }
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

AdminSocketServer::~AdminSocketServer() { Stop(); }

void AdminSocketServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  const uint64_t one = 1;
  if (write(stop_event_.get(), &one, sizeof(one)) != sizeof(one)) {
    spdlog::error("admin socket: cannot wake its thread to stop: {}", std::strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
  unlink(options_.path.c_str());
}

void AdminSocketServer::Run() {
  while (true) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_event_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("admin socket: poll: {}; no longer accepting", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0) AcceptAll();
  }
}

void AdminSocketServer::AcceptAll() {
  while (true) {
    // Non-blocking, as gRPC's endpoints need.
    UniqueFd socket(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!socket.valid()) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("admin socket: accept: {}", std::strerror(errno));
      }
      return;
    }
    ucred peer{};
    socklen_t length = sizeof(peer);
    if (getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
      spdlog::warn("admin socket: SO_PEERCRED: {}; closing the connection", std::strerror(errno));
      continue;
    }
    const bool is_operator = IsOperator(peer.uid);
    if (!is_operator) {
      spdlog::info("admin socket: pid {} uid {} is not an operator: its calls are refused",
                   peer.pid, peer.uid);
    }
    // gRPC owns the descriptor from here on.
    grpc::AddInsecureChannelFromFd(is_operator ? operators_ : others_, socket.Release());
  }
}

}  // namespace gpumux
