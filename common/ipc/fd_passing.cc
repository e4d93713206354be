#include "common/ipc/fd_passing.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpumux/common/sealed_memory.h"

namespace gpumux {
namespace {

// Room for kMaxPassedFds descriptors, aligned as CMSG_* expect.
union ControlBuffer {
  char bytes[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  cmsghdr align;
};

}  // namespace

absl::Status SendFds(int socket, absl::string_view payload, absl::Span<const int> fds) {
  if (payload.empty() || payload.size() > kMaxPassedPayload || fds.size() > kMaxPassedFds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a descriptor message carries 1 to ", kMaxPassedPayload, " bytes and at most ",
        kMaxPassedFds, " descriptors, not ", payload.size(), " bytes and ", fds.size()));
  }
  iovec io{const_cast<char*>(payload.data()), payload.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  ControlBuffer control{};
  if (!fds.empty()) {
    message.msg_control = control.bytes;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t sent;
  do {
    sent = sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return SystemCallError(errno, "sendmsg");
  if (static_cast<size_t>(sent) != payload.size()) {
    return absl::UnavailableError(
        absl::StrCat("sendmsg sent ", sent, " of ", payload.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PassedMessage> ReceiveFds(int socket) {
  PassedMessage received;
  received.payload.resize(kMaxPassedPayload);
  iovec io{received.payload.data(), received.payload.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  ControlBuffer control{};
  message.msg_control = control.bytes;
  message.msg_controllen = sizeof(control.bytes);
  ssize_t got;
  do {
    got = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return SystemCallError(errno, "recvmsg");
  // Whatever arrived is ours to close, even when the message is refused.
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      received.fds.emplace_back(fd);
    }
  }
  if (got == 0) return absl::OutOfRangeError("the peer closed the socket");
  if ((message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a descriptor message over ", kMaxPassedPayload,
                                                   " bytes or ", kMaxPassedFds,
                                                   " descriptors was cut short"));
  }
  received.payload.resize(static_cast<size_t>(got));
  return received;
}

}  // namespace gpumux
