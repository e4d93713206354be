#pragma once

// Raw-socket helpers for the HTTP listener's tests, which speak to it below
// any client library: read a status line, and count the connections the
// listener closed unanswered.

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux::testing {

// The status line of the reply on `fd`, read up to it (the server may keep
// the connection for a next request); "" when it closes unanswered.
inline std::string StatusLine(int fd) {
  std::string reply;
  char buffer[4096];
  for (ssize_t n;
       reply.find("\r\n") == std::string::npos && (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    reply.append(buffer, static_cast<size_t>(n));
  }
  return reply.substr(0, reply.find("\r\n"));
}

// How many of `connections` (which sent nothing, so the listener keeps
// those it allows until their request deadline) it closed unanswered:
// counted once `expected` are closed or `within` passed, and again 300 ms
// later, so that more than `expected` shows too.
inline int ClosedUnanswered(absl::Span<const UniqueFd> connections, int expected,
                            absl::Duration within) {
  std::vector<bool> closed(connections.size(), false);
  int count = 0;
  auto look = [&] {
    for (size_t i = 0; i < connections.size(); ++i) {
      char byte;
      if (closed[i]) continue;
      const ssize_t n = recv(connections[i].get(), &byte, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        closed[i] = true;
        ++count;
      }
    }
  };
  for (const absl::Time deadline = absl::Now() + within; count < expected && absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(10))) {
    look();
  }
  absl::SleepFor(absl::Milliseconds(300));
  look();
  return count;
}

}  // namespace gpumux::testing
