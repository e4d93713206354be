#include "common/ipc/memory_socket.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/ipc/fd_passing.h"

namespace gpumux {
namespace {

// A reply that has not come in this long means a wedged daemon.
constexpr timeval kReplyTimeout{10, 0};

}  // namespace

std::string MemorySocketPath(absl::string_view grpc_socket_path) {
  return absl::StrCat(grpc_socket_path, kMemorySocketSuffix);
}

absl::StatusOr<std::string> UnixSocketPathOf(absl::string_view target) {
  absl::string_view path = target;
  if (absl::ConsumePrefix(&path, "unix://")) {
    // "unix:///p": the path is absolute.
  } else if (absl::ConsumePrefix(&path, "unix:")) {
    // "unix:p" or "unix:/p".
  }
  if (path.empty() || (path == target && path.front() != '/')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", target,
        "' is not a Unix socket address: shared memory is handed out on the Unix socket only"));
  }
  return std::string(path);
}

absl::StatusOr<UniqueFd> ConnectMemorySocket(absl::string_view path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("memory socket path '", path, "' is too long"));
  }
  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return SystemCallError(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  std::memcpy(address.sun_path, path.data(), path.size());
  if (connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach gpumuxd's memory socket ", path, ": ", std::strerror(errno)));
  }
  return socket;
}

absl::Status NoMemorySocketError() {
  return absl::FailedPreconditionError(
      "this client reached gpumuxd by TCP, which hands out no shared memory: connect by its Unix "
      "socket");
}

bool IsMemoryFileKey(absl::string_view key) {
  return key.size() == kMemoryFileKeyChars && std::all_of(key.begin(), key.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string FormatMemoryRequest(absl::string_view credentials, absl::string_view key) {
  return absl::StrCat(kMemoryRequestVersion, " ", credentials, " ", key);
}

absl::StatusOr<MemoryRequest> ParseMemoryRequest(absl::string_view payload) {
  std::vector<absl::string_view> words = absl::StrSplit(payload, ' ');
  if (words.empty() || words[0] != kMemoryRequestVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("a memory socket request starts with \"", kMemoryRequestVersion, " \""));
  }
  if (words.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a memory socket request is \"", kMemoryRequestVersion, " <session_id>:<secret> <key>\""));
  }
  if (!IsMemoryFileKey(words[2])) {
    return absl::InvalidArgumentError(
        absl::StrCat("a memory file key is ", kMemoryFileKeyChars, " lowercase hex digits"));
  }
  return MemoryRequest{std::string(words[1]), std::string(words[2])};
}

std::string FormatMemoryReply(const absl::Status& status, uint64_t size) {
  if (status.ok()) return absl::StrCat("ok ", size);
  std::string reply =
      absl::StrCat("error ", static_cast<int>(status.code()), " ", status.message());
  if (reply.size() > kMaxPassedPayload) reply.resize(kMaxPassedPayload);
  return reply;
}

absl::Status ParseMemoryReply(absl::string_view payload, uint64_t* size) {
  if (absl::ConsumePrefix(&payload, "ok ")) {
    if (absl::SimpleAtoi(payload, size)) return absl::OkStatus();
  } else if (absl::ConsumePrefix(&payload, "error ")) {
    const size_t space = payload.find(' ');
    int code = 0;
    if (space != absl::string_view::npos && absl::SimpleAtoi(payload.substr(0, space), &code) &&
        code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
      return absl::Status(static_cast<absl::StatusCode>(code), payload.substr(space + 1));
    }
  }
  return absl::InternalError("gpumuxd's memory socket sent a reply this client cannot read");
}

absl::Status MemoryFileFetcher::ConnectLocked() {
  GPUMUX_ASSIGN_OR_RETURN(UniqueFd socket, ConnectMemorySocket(socket_path_));
  if (setsockopt(socket.get(), SOL_SOCKET, SO_RCVTIMEO, &kReplyTimeout, sizeof(kReplyTimeout)) !=
      0) {
    return SystemCallError(errno, "setsockopt(SO_RCVTIMEO)");
  }
  socket_ = std::move(socket);
  return absl::OkStatus();
}

absl::Status MemoryFileFetcher::Connect() {
  absl::MutexLock lock(&mu_);
  return socket_.valid() ? absl::OkStatus() : ConnectLocked();
}

bool MemoryFileFetcher::connected() {
  absl::MutexLock lock(&mu_);
  return socket_.valid();
}

absl::StatusOr<SealedMemory> MemoryFileFetcher::Fetch(absl::string_view key,
                                                      uint64_t expected_size) {
  GPUMUX_ASSIGN_OR_RETURN(UniqueFd fd, FetchDescriptor(key, expected_size));
  return SealedMemory::Adopt(std::move(fd), expected_size);
}

absl::StatusOr<UniqueFd> MemoryFileFetcher::FetchDescriptor(absl::string_view key,
                                                            uint64_t expected_size) {
  const std::string request = FormatMemoryRequest(credentials_, key);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<PassedMessage> reply;
  // A connection that broke (the daemon closed it) is made again once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!socket_.valid()) GPUMUX_RETURN_IF_ERROR(ConnectLocked());
    absl::Status sent = SendFds(socket_.get(), request, {});
    if (sent.ok()) reply = ReceiveFds(socket_.get());
    if (sent.ok() && reply.ok()) break;
    socket_.Reset();
    if (!sent.ok()) reply = sent;
    if (reply.status().code() == absl::StatusCode::kResourceExhausted) return reply.status();
  }
  if (!reply.ok()) {
    // EAGAIN after kReplyTimeout reads "Resource temporarily unavailable".
    return absl::UnavailableError(absl::StrCat("gpumuxd's memory socket ", socket_path_,
                                               " failed: ", reply.status().message()));
  }
  uint64_t size = 0;
  GPUMUX_RETURN_IF_ERROR(ParseMemoryReply(reply->payload, &size));
  if (reply->fds.size() != 1) {
    return absl::InternalError(absl::StrCat("gpumuxd's memory socket answered with ",
                                            reply->fds.size(), " descriptors instead of 1"));
  }
  if (size != expected_size) {
    return absl::InvalidArgumentError(absl::StrCat("the memory file under key ", key, " has ", size,
                                                   " bytes, not the ", expected_size, " expected"));
  }
  return std::move(reply->fds[0]);
}

}  // namespace gpumux
