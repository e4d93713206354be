#pragma once

// torch.cuda.nvtx for a Client's session: marks and nested ranges, kept by
// the daemon with their time stamps for the session's profile. Ranges nest
// per thread, as PyTorch's do: each thread of the process has a stack of its
// own (the daemon keeps it under the thread's Linux id), and depths count on
// it. Messages longer than 4096 bytes are INVALID_ARGUMENT (the daemon's).
// Thread-safe.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

class Client;

namespace nvtx {

// nvtx.mark(msg): an instantaneous event.
absl::Status Mark(Client& client, absl::string_view message);
// nvtx.range_push(msg): the 0-based depth of the range started on the
// calling thread. RESOURCE_EXHAUSTED past 1024 nested ranges on the thread,
// or 4096 open in the session.
absl::StatusOr<int> RangePush(Client& client, absl::string_view message);
// nvtx.range_pop(): the depth of the range the calling thread ended;
// FAILED_PRECONDITION when none is open on it.
absl::StatusOr<int> RangePop(Client& client);

// nvtx.range(msg) as a scope: pushes in the constructor and, when that
// succeeded, pops in the destructor (a failed pop is logged). Must not
// outlive `client`.
class Range {
 public:
  Range(Client& client, absl::string_view message);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

  // The push's result: the range's depth, or why it was not opened.
  const absl::StatusOr<int>& depth() const { return depth_; }

 private:
  Client& client_;
  const absl::StatusOr<int> depth_;
};

}  // namespace nvtx
}  // namespace gpumux
