#pragma once

// SessionOverview: what the operator's session list shows of one session,
// joined from the registry (who it is), the streams (how many streams and
// events it created) and the memory books (its usage per device).
// ListSessionOverviews is thread-safe: each book locks for itself, so the
// parts of one overview are read one after another, not as one snapshot.

#include <vector>

#include "server/core/memory_manager.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"

namespace gpumux {

struct SessionOverview {
  SessionRecord info;
  StreamCounts counts;
  std::vector<SessionDeviceBooks> devices;  // MemoryManager::Usage
  bool stats_page = false;
  bool stats_page_rejected = false;
};

// One overview per open session, in SessionRegistry::List's order.
std::vector<SessionOverview> ListSessionOverviews(const SessionRegistry& sessions,
                                                  const StreamManager& streams,
                                                  const MemoryManager& memory);

}  // namespace gpumux
