#include "server/core/live_profile.h"

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/core/notice_sink.h"

namespace gpumux {

absl::StatusOr<SessionProfile> ProfileLiveSession(DeviceProfiler& profiler,
                                                  const SessionRegistry& sessions,
                                                  SessionId session, absl::Duration duration,
                                                  uint64_t capacity, absl::Duration reply_timeout) {
  if (duration < absl::Milliseconds(1) || duration > kMaxLiveProfile) {
    return absl::InvalidArgumentError(
        absl::StrCat("a profile lasts 1 ms to 1 hour, not ", absl::FormatDuration(duration)));
  }
  if (capacity > DeviceProfiler::kMaxCapacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a profile keeps at most ", DeviceProfiler::kMaxCapacity, " records, not ", capacity));
  }
  std::shared_ptr<NoticeSink> sink = sessions.SinkOf(session);
  const std::optional<SessionRecord> info = sessions.Get(session);
  if (sink == nullptr || !info.has_value()) {
    return absl::NotFoundError(absl::StrCat("no session ", session.value(), " is open"));
  }
  const uint64_t kept = capacity == 0 ? DeviceProfiler::kDefaultCapacity : capacity;
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t window, profiler.BeginWindow(session, kept));
  SessionProfile out;
  out.start_ns = ProfileClockNanos();
  if (info->records_host_calls) sink->StartProfiling(window, kept);
  const bool lasted = profiler.AwaitWindow(window, absl::Now() + duration);
  if (info->records_host_calls) {
    sink->StopProfiling(window);
    out.host = profiler.AwaitHostProfile(
        window, absl::Now() + (lasted ? reply_timeout : absl::ZeroDuration()));
  }
  out.end_ns = ProfileClockNanos();
  out.device = profiler.EndWindow(window);
  if (!out.host.has_value()) {
    if (!info->records_host_calls) {
      out.host_missing =
          absl::StrCat("session ", session.value(), "'s client ('", info->client_name,
                       "') does not record its calls: it speaks the wire API "
                       "without libgpumux; only the device side was recorded");
    } else if (lasted) {
      out.host_missing = absl::StrCat("the client did not send its side within ",
                                      absl::FormatDuration(reply_timeout), " (a busy client)");
    } else {
      out.host_missing = "the session ended, or the daemon stopped, before the window";
    }
  }
  return out;
}

}  // namespace gpumux
