#include "server/rpc/memory_socket_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/ipc/fd_passing.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/common/sealed_memory.h"
#include "server/rpc/unix_listener.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr int kListenBacklog = 256;
constexpr int kEventsPerWait = 64;

}  // namespace

struct MemorySocketServer::Connection {
  UniqueFd socket;
  ucred peer{};
  absl::Time last_request;  // or its accept
};

absl::StatusOr<std::unique_ptr<MemorySocketServer>> MemorySocketServer::Start(
    const Options& options, SessionRegistry* sessions, const MemoryFileTable* memory_files) {
  auto server =
      std::unique_ptr<MemorySocketServer>(new MemorySocketServer(options, sessions, memory_files));
  absl::StatusOr<UniqueFd> listener = ListenOnUnixSocket(
      "memory socket", options.path, SOCK_SEQPACKET, options.group, kListenBacklog);
  if (!listener.ok()) return listener.status();
  server->listener_ = *std::move(listener);
  server->epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  server->stop_event_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!server->epoll_.valid() || !server->stop_event_.valid()) {
    const int error = errno;
    unlink(options.path.c_str());
    return SystemCallError(error, "epoll_create1/eventfd");
  }
  for (int fd : {server->listener_.get(), server->stop_event_.get()}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(server->epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      const int error = errno;
      unlink(options.path.c_str());
      return SystemCallError(error, "epoll_ctl");
    }
  }
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

MemorySocketServer::~MemorySocketServer() { Stop(); }

void MemorySocketServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  const uint64_t one = 1;
  if (write(stop_event_.get(), &one, sizeof(one)) != sizeof(one)) {
    spdlog::error("memory socket: cannot wake its thread to stop: {}", std::strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
  unlink(options_.path.c_str());
}

void MemorySocketServer::Run() {
  absl::flat_hash_map<int, std::unique_ptr<Connection>> connections;
  absl::flat_hash_map<uid_t, size_t> per_uid;
  const auto close_connection = [&](int fd) {
    auto it = connections.find(fd);
    if (it == connections.end()) return;
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    if (--per_uid[it->second->peer.uid] == 0) per_uid.erase(it->second->peer.uid);
    connections.erase(it);
  };
  // Idle connections are looked for a few times per idle_timeout.
  const int sweep_ms = static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(options_.idle_timeout / 4), 10, 1000));
  absl::Time next_sweep = absl::Now() + absl::Milliseconds(sweep_ms);
  epoll_event events[kEventsPerWait];
  while (true) {
    const int ready = epoll_wait(epoll_.get(), events, kEventsPerWait, sweep_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      spdlog::error("memory socket: epoll_wait: {}; no more shared memory is handed out",
                    std::strerror(errno));
      return;
    }
    const absl::Time now = absl::Now();
    for (int i = 0; i < ready; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_event_.get()) return;  // `connections` close with it
      if (fd == listener_.get()) {
        while (true) {
          ucred peer{};
          socklen_t length = sizeof(peer);
          UniqueFd socket(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
          if (!socket.valid()) {
            const int error = errno;
            if (error != EAGAIN && error != EINTR && error != ECONNABORTED) {
              connections_refusal_
                  .Refuse(absl::StrCat("memory socket: accept: ", std::strerror(error)))
                  .IgnoreError();
            }
            // Out of descriptors, the connection stays queued and the
            // listener readable: pause rather than spin until some close.
            if (error == EMFILE || error == ENFILE)
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            break;
          }
          if (getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
            spdlog::warn("memory socket: SO_PEERCRED: {}; closing the connection",
                         std::strerror(errno));
            continue;
          }
          // Told why before it is closed: its first request reads this.
          absl::Status refused;
          if (connections.size() >= options_.max_connections) {
            refused = connections_refusal_.Refuse(
                absl::StrCat("memory socket: ", connections.size(),
                             " connections are open, the most it serves; retry once some close"));
          } else if (per_uid[peer.uid] >= options_.max_connections_per_uid) {
            refused = connections_refusal_.Refuse(absl::StrCat(
                "memory socket: uid ", peer.uid, " has ", per_uid[peer.uid],
                " connections open, the most one user may; close some (idle ones close after ",
                absl::FormatDuration(options_.idle_timeout), ")"));
          }
          if (!refused.ok()) {
            if (per_uid[peer.uid] == 0) per_uid.erase(peer.uid);
            SendFds(socket.get(), FormatMemoryReply(refused, 0), {}).IgnoreError();
            continue;
          }
          epoll_event event{};
          event.events = EPOLLIN | EPOLLRDHUP;
          event.data.fd = socket.get();
          if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, socket.get(), &event) != 0) {
            connections_refusal_
                .Refuse(absl::StrCat("memory socket: epoll_ctl: ", std::strerror(errno)))
                .IgnoreError();
            continue;
          }
          ++per_uid[peer.uid];
          const int key = socket.get();
          connections[key] = std::make_unique<Connection>(Connection{std::move(socket), peer, now});
        }
        continue;
      }
      auto it = connections.find(fd);
      if (it == connections.end()) continue;
      it->second->last_request = now;
      const bool hung_up = (events[i].events & (EPOLLHUP | EPOLLERR)) != 0;
      if (hung_up || !ServeRequests(*it->second)) close_connection(fd);
    }
    if (now < next_sweep) continue;
    next_sweep = now + absl::Milliseconds(sweep_ms);
    std::vector<int> idle;
    for (const auto& [fd, connection] : connections) {
      if (now - connection->last_request >= options_.idle_timeout) idle.push_back(fd);
    }
    for (int fd : idle) close_connection(fd);
  }
}

bool MemorySocketServer::ServeRequests(Connection& connection) {
  while (true) {
    absl::StatusOr<PassedMessage> request = ReceiveFds(connection.socket.get());
    if (!request.ok()) {
      // EAGAIN: everything sent so far is answered.
      if (absl::IsUnavailable(request.status())) return true;
      if (!absl::IsOutOfRange(request.status())) {
        spdlog::debug("memory socket: closing a connection of pid {}: {}", connection.peer.pid,
                      request.status().ToString());
        // A message cut short (too many descriptors, too long): the peer is
        // told why before the connection closes.
        SendFds(connection.socket.get(), FormatMemoryReply(request.status(), 0), {}).IgnoreError();
      }
      return false;
    }
    absl::StatusOr<FiledDescriptor> memory =
        Answer(request->payload, request->fds.size(), connection.peer.uid);
    request->fds.clear();  // descriptors a peer attached are not kept, not even until the reply
    absl::Status sent;
    if (memory.ok()) {
      const int fd = memory->fd();
      sent = SendFds(connection.socket.get(), FormatMemoryReply(absl::OkStatus(), memory->size),
                     {&fd, 1});
    } else {
      spdlog::debug("memory socket: refused pid {} uid {}: {}", connection.peer.pid,
                    connection.peer.uid, memory.status().ToString());
      sent = SendFds(connection.socket.get(), FormatMemoryReply(memory.status(), 0), {});
    }
    // A peer that does not read its replies (its buffer is full) is dropped.
    if (!sent.ok()) return false;
  }
}

absl::StatusOr<FiledDescriptor> MemorySocketServer::Answer(const std::string& payload, size_t fds,
                                                           uid_t peer_uid) {
  absl::StatusOr<MemoryRequest> request = ParseMemoryRequest(payload);
  if (!request.ok()) return request.status();
  if (fds != 0) return absl::InvalidArgumentError("a memory socket request carries no descriptors");
  absl::StatusOr<SessionId> session = sessions_->Authenticate(request->credentials);
  if (!session.ok()) return session.status();
  if (absl::Status peer = sessions_->BindMemoryPeer(*session, peer_uid); !peer.ok()) return peer;
  return memory_files_->Open(request->key, *session);
}

}  // namespace gpumux
