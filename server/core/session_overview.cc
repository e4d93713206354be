#include "server/core/session_overview.h"

#include <utility>

namespace gpumux {

std::vector<SessionOverview> ListSessionOverviews(const SessionRegistry& sessions,
                                                  const StreamManager& streams,
                                                  const MemoryManager& memory) {
  std::vector<SessionOverview> out;
  for (SessionRecord& info : sessions.List()) {
    SessionOverview overview;
    overview.counts = streams.Counts(info.id);
    overview.devices = memory.Usage(info.id);
    overview.stats_page = memory.HasStatsPage(info.id);
    overview.stats_page_rejected = memory.StatsPageRejected(info.id);
    overview.info = std::move(info);
    out.push_back(std::move(overview));
  }
  return out;
}

}  // namespace gpumux
