#pragma once

// What the daemon reports about a session (gpumux sessions, Observer::
// ListSessions) as plain structs.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpumux/common/ids.h"

namespace gpumux {

// A session's books on one device.
struct SessionDeviceUsage {
  int32_t device = 0;
  // Bytes of blocks charged to the session (allocated_bytes.all.current).
  uint64_t allocated_bytes = 0;
  // Bytes of segments reserved for the session (reserved_bytes.all.current).
  uint64_t reserved_bytes = 0;
  uint64_t allocations = 0;
  // Bytes of other sessions' allocations this session imported.
  uint64_t imported_bytes = 0;
  // 0 when unlimited.
  uint64_t memory_limit_bytes = 0;
  // allocated_bytes.all.peak and reserved_bytes.all.peak.
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
};

struct SessionInfo {
  SessionId session_id;
  std::string client_name;
  int64_t pid = 0;
  std::string tenant;
  std::map<std::string, std::string> labels;
  int64_t opened_unix_micros = 0;
  // Streams the session created (default streams not counted) and events it
  // created or opened, alive now.
  uint32_t streams = 0;
  uint32_t events = 0;
  // Allocates locally, publishing its figures on a stats page; and whether
  // the daemon rejected them (they are left out of the session's figures).
  bool stats_page = false;
  bool stats_page_rejected = false;
  // One entry per device of the daemon, by index.
  std::vector<SessionDeviceUsage> devices;
};

}  // namespace gpumux
