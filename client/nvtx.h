#pragma once

// torch.cuda.nvtx for a Client's session: marks and a stack of nested
// ranges, kept by the daemon with their time stamps for the session's
// profile. Messages longer than 4096 bytes are INVALID_ARGUMENT (the
// daemon's). Thread-safe; the stack is the session's, shared by its threads.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

class Client;

namespace nvtx {

// nvtx.mark(msg): an instantaneous event.
absl::Status Mark(Client& client, absl::string_view message);
// nvtx.range_push(msg): the 0-based depth of the range started.
// RESOURCE_EXHAUSTED past 1024 nested ranges.
absl::StatusOr<int> RangePush(Client& client, absl::string_view message);
// nvtx.range_pop(): the depth of the range ended; FAILED_PRECONDITION when
// no range is open.
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
