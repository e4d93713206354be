#include "server/rpc/admin_socket_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sealed_memory.h"
#include "grpcpp/server_posix.h"
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
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (options.path.empty() || options.path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("admin socket path '", options.path,
                                                   "' is empty or longer than ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, options.path.data(), options.path.size());
  server->listener_ = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!server->listener_.valid()) return SystemCallError(errno, "socket(AF_UNIX, SOCK_STREAM)");
  if (bind(server->listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the admin socket ", options.path, ": ", std::strerror(errno)));
  }
  if (options.group.has_value() &&
      chown(options.path.c_str(), static_cast<uid_t>(-1), *options.group) != 0) {
    const int error = errno;
    unlink(options.path.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot give ", options.path, " to group ",
                                                    *options.group, ": ", std::strerror(error)));
  }
  if (chmod(options.path.c_str(), 0660) != 0) {
    const int error = errno;
    unlink(options.path.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set mode 0660 on ", options.path, ": ", std::strerror(error)));
  }
  if (listen(server->listener_.get(), kListenBacklog) != 0) {
    const int error = errno;
    unlink(options.path.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.path, ": ", std::strerror(error)));
  }
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
