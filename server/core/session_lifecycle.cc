#include "server/core/session_lifecycle.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/byte_size.h"
#include "common/base/logging.h"
#include "spdlog/spdlog.h"

namespace gpumux {

absl::StatusOr<OpenedSession> SessionLifecycle::Open(SessionRecord info,
                                                     std::shared_ptr<NoticeSink> sink,
                                                     absl::string_view profile_token) {
  if (profile_token.size() > kMaxProfileTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the profile token is ", profile_token.size(),
                                                   " bytes; at most ", kMaxProfileTokenBytes,
                                                   " are allowed (Profile.Start gives 32)"));
  }
  absl::StatusOr<OpenedSession> opened = sessions_->Open(std::move(info), std::move(sink));
  if (!opened.ok()) return opened;
  memory_->AddSession(opened->info.id, opened->info.tenant, NamedTenant(opened->info));
  streams_->AddSession(opened->info.id, NamedTenant(opened->info));
  staging_->AddSession(opened->info.id);
  rng_->AddSession(opened->info.id);
  nvtx_->AddSession(opened->info.id);
  if (profiler_ != nullptr) profiler_->AddSession(opened->info.id, NamedTenant(opened->info));
  opened_.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("session {} opened: client '{}' pid {} tenant '{}'", opened->info.id.value(),
               opened->info.client_name, opened->info.pid, opened->info.tenant);
  if (!profile_token.empty() && profiler_ != nullptr) {
    if (profiler_->Join(opened->info.id, profile_token)) {
      spdlog::info("session {} is profiled (gpumux bottleneck)", opened->info.id.value());
    } else {
      spdlog::warn("session {} named a profile that is not open; it runs unprofiled",
                   opened->info.id.value());
    }
  }
  return opened;
}

void SessionLifecycle::Close(SessionId id, SessionEndReason reason, absl::string_view detail) {
  std::optional<SessionRecord> info = sessions_->Close(id);
  if (!info.has_value()) return;
  absl::Time start = absl::Now();
  if (profiler_ != nullptr) profiler_->SessionEnded(id);
  // The groups it formed end (waiting for a collective of theirs that runs).
  if (groups_ != nullptr) groups_->SessionEnded(id);
  // Memory first: its pending frees wait on work queued on the session's
  // streams, which still completes after they are destroyed.
  ReleaseSummary r = memory_->ReleaseSession(id);
  StreamCounts s = streams_->ReleaseSession(id);
  staging_->RemoveSession(id);
  rng_->RemoveSession(id);
  nvtx_->RemoveSession(id);
  ended_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  reclaimed_allocated_bytes_.fetch_add(r.allocated_bytes, std::memory_order_relaxed);
  reclaimed_reserved_bytes_.fetch_add(r.reserved_bytes, std::memory_order_relaxed);
  spdlog::info(
      "session {} ended ({}: {}): client '{}' pid {} tenant '{}'; reclaimed {} allocations ({}), "
      "{} segments ({}), {} streams, {} events, dropped {} imports, handed {} shared allocations "
      "to importers, in {:.3f} ms",
      id.value(), SessionEndReasonName(reason), std::string(detail), info->client_name, info->pid,
      info->tenant, r.allocations, FormatTorchSize(r.allocated_bytes), r.segments,
      FormatTorchSize(r.reserved_bytes), s.streams, s.events, r.imports_dropped, r.handed_over,
      absl::ToDoubleMilliseconds(absl::Now() - start));
}

absl::Status SessionLifecycle::Kill(SessionId id, absl::string_view reason) {
  std::shared_ptr<NoticeSink> sink = sessions_->SinkOf(id);
  if (sink == nullptr) {
    return absl::NotFoundError(absl::StrCat("no session ", id.value(), " is open"));
  }
  const std::string message = absl::StrCat("session ", id.value(), " was killed by an operator",
                                           reason.empty() ? "" : ": ", reason);
  sink->Terminate(SessionEndReason::kKilled, message);
  // The sink closes the session; a sink that could not (its stream already
  // gone) leaves it to this.
  Close(id, SessionEndReason::kKilled, message);
  return absl::OkStatus();
}

SessionCounts SessionLifecycle::counts() const {
  SessionCounts out;
  out.opened = opened_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < out.ended.size(); ++i)
    out.ended[i] = ended_[i].load(std::memory_order_relaxed);
  out.reclaimed_allocated_bytes = reclaimed_allocated_bytes_.load(std::memory_order_relaxed);
  out.reclaimed_reserved_bytes = reclaimed_reserved_bytes_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace gpumux
