#include "server/core/session_lifecycle.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gpumux {

absl::StatusOr<OpenedSession> SessionLifecycle::Open(SessionInfo info,
                                                     std::shared_ptr<NoticeSink> sink) {
  absl::StatusOr<OpenedSession> opened = sessions_->Open(std::move(info), std::move(sink));
  if (!opened.ok()) return opened;
  memory_->AddSession(opened->info.id, opened->info.tenant);
  streams_->AddSession(opened->info.id);
  staging_->AddSession(opened->info.id);
  rng_->AddSession(opened->info.id);
  nvtx_->AddSession(opened->info.id);
  spdlog::info("session {} opened: client '{}' pid {} tenant '{}'", opened->info.id.value(),
               opened->info.client_name, opened->info.pid, opened->info.tenant);
  return opened;
}

void SessionLifecycle::Close(SessionId id, absl::string_view reason) {
  std::optional<SessionInfo> info = sessions_->Close(id);
  if (!info.has_value()) return;
  absl::Time start = absl::Now();
  // Memory first: its pending frees wait on work queued on the session's
  // streams, which still completes after they are destroyed.
  ReleaseSummary r = memory_->ReleaseSession(id);
  StreamCounts s = streams_->ReleaseSession(id);
  staging_->RemoveSession(id);
  rng_->RemoveSession(id);
  nvtx_->RemoveSession(id);
  spdlog::info(
      "session {} ended ({}): client '{}' pid {} tenant '{}'; reclaimed {} allocations ({}), {} "
      "segments ({}), "
      "{} streams, {} events, dropped {} imports, handed {} shared allocations to importers, in "
      "{:.3f} ms",
      id.value(), std::string(reason), info->client_name, info->pid, info->tenant, r.allocations,
      FormatTorchSize(r.allocated_bytes), r.segments, FormatTorchSize(r.reserved_bytes), s.streams,
      s.events, r.imports_dropped, r.handed_over, absl::ToDoubleMilliseconds(absl::Now() - start));
}

}  // namespace gpumux
