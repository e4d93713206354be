#pragma once

// StatsPages: the stats pages of sessions that allocate locally
// (common/stats_page.h). The daemon creates a session's page on request as a
// sealed memory file filed in the MemoryFileTable for that session alone,
// maps it read-only, and reads it whenever it reports the session's or the
// device's figures. The page is untrusted: a read that cannot get a
// consistent copy, or figures no allocator could have (PlausibleLocalStats
// against the daemon's own reserved bytes for the session), count as no
// figures, and the session is flagged (logged once; v1::SessionInfo's
// stats_page_rejected). Thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/ids.h"
#include "common/memory_stats.h"
#include "common/sealed_memory.h"
#include "common/stats_page.h"
#include "server/backend/memory_file_table.h"

namespace gpumux {

struct StatsPageInfo {
  std::string key;  // its memory file's key in the MemoryFileTable
  uint64_t size = 0;
  int device_count = 0;
};

class StatsPages {
 public:
  // `memory_files` must outlive this.
  StatsPages(MemoryFileTable* memory_files, int device_count);
  ~StatsPages();

  // The session's page, created on first call. RESOURCE_EXHAUSTED when the
  // memory is not there.
  absl::StatusOr<StatsPageInfo> GetOrCreate(SessionId session) ABSL_LOCKS_EXCLUDED(mu_);
  // The figures the session's client published for `device`, when it has a
  // page and they are plausible for `reserved` (the daemon's reserved bytes
  // of the session there); nullopt otherwise.
  std::optional<DeviceStats> Read(SessionId session, DeviceIndex device, int64_t reserved) const
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Has(SessionId session) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a read of the session's page was ever rejected.
  bool Rejected(SessionId session) const ABSL_LOCKS_EXCLUDED(mu_);
  // The sessions with a page.
  std::vector<SessionId> Sessions() const ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the session's page (its end).
  void Remove(SessionId session) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Page {
    StatsPageInfo info;
    MemoryMapping mapping;  // read-only
    std::unique_ptr<StatsPageReader> reader;
    mutable std::atomic<bool> rejected{false};
  };

  MemoryFileTable* const memory_files_;
  const int device_count_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SessionId, std::shared_ptr<Page>> pages_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
