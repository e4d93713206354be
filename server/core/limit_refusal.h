#pragma once

// LimitRefusal: how a daemon-wide or per-session budget says no. The caller
// gets RESOURCE_EXHAUSTED with a message naming the limit, what was asked and
// what to do; the operator gets a log line naming the limit, at most one per
// limit every few seconds (with how many refusals it stood for), so a client
// hammering a full budget cannot flood the log. Thread-safe; one instance per
// limit, owned by whatever enforces it.

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumux {

class LimitRefusal {
 public:
  // `limit` names the limit in log lines, e.g. "--max-streams".
  explicit LimitRefusal(std::string limit) : limit_(std::move(limit)) {}

  // RESOURCE_EXHAUSTED with `message`; logs it unless a line for this limit
  // went out within the last few seconds.
  absl::Status Refuse(absl::string_view message);

  uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }

 private:
  const std::string limit_;
  // Counters only: nothing else is ordered by them.
  std::atomic<uint64_t> refusals_{0};
  std::atomic<uint64_t> logged_refusals_{0};
  std::atomic<int64_t> next_log_ns_{0};
};

}  // namespace gpumux
