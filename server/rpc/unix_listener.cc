#include "server/rpc/unix_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpumux/common/sealed_memory.h"

namespace gpumux {

absl::StatusOr<UniqueFd> ListenOnUnixSocket(absl::string_view what, const std::string& path,
                                            int type, std::optional<gid_t> group, int backlog) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " path '", path,
                                                   "' is empty or longer than ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  UniqueFd listener(socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.valid()) {
    return SystemCallError(
        errno, absl::StrCat("socket(AF_UNIX, ",
                            type == SOCK_SEQPACKET ? "SOCK_SEQPACKET" : "SOCK_STREAM", ")"));
  }
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (group.has_value() && chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
    const int error = errno;
    unlink(path.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot give ", path, " to group ", *group, ": ", std::strerror(error)));
  }
  if (chmod(path.c_str(), 0660) != 0) {
    const int error = errno;
    unlink(path.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set mode 0660 on ", path, ": ", std::strerror(error)));
  }
  if (listen(listener.get(), backlog) != 0) {
    const int error = errno;
    unlink(path.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", path, ": ", std::strerror(error)));
  }
  return listener;
}

}  // namespace gpumux
