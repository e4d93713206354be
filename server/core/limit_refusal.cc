#include "server/core/limit_refusal.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr absl::Duration kLogEvery = absl::Seconds(5);

}  // namespace

absl::Status LimitRefusal::Refuse(absl::string_view message) {
  const uint64_t count = refusals_.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t next = next_log_ns_.load(std::memory_order_relaxed);
  // One thread wins the slot; the others only count.
  if (now >= next &&
      next_log_ns_.compare_exchange_strong(next, now + absl::ToInt64Nanoseconds(kLogEvery),
                                           std::memory_order_relaxed)) {
    const uint64_t since = count - logged_refusals_.exchange(count, std::memory_order_relaxed);
    spdlog::warn("limit {} refused a request ({} refusal{} since the last line, {} in all): {}",
                 limit_, since, since == 1 ? "" : "s", count, message);
  }
  return absl::ResourceExhaustedError(message);
}

}  // namespace gpumux
