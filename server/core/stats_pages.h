#pragma once

// StatsPages: the stats pages of sessions that allocate locally
// (common/ipc/stats_page.h). The daemon creates a session's page on request as a
// sealed memory file filed in the MemoryFileTable for that session alone,
// maps it read-only, and reads it whenever it reports the session's or the
// device's figures. The page is untrusted: a read that cannot get a
// consistent copy counts as no figures that time; figures no allocator could
// have (PlausibleLocalStats against the daemon's own reserved bytes for the
// session) count as none from then until the session ends, which is flagged
// (logged once; v1::SessionInfo's stats_page_rejected).
//
// The device's figures must not go back (Prometheus reads a counter that
// falls as a reset): a page's part in them keeps what the client counted
// before it reset its own counters, an ended session's counters stay in
// them (Retire), and their peaks never fall (Settle). Thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/formats/memory_stats.h"
#include "common/ipc/stats_page.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/sealed_memory.h"
#include "server/backend/memory_file_table.h"

namespace gpumux {

// One read of a session's page for one device.
struct StatsPageFigures {
  // As the client published them: the session's own figures.
  DeviceStats session;
  // Its part in the device's figures: counters as `session`'s plus what the
  // client counted before each reset of its own.
  DeviceStats device;
};

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
  // page, consistent, plausible for `reserved` (the daemon's reserved bytes
  // of the session there) and never implausible before; nullopt otherwise.
  std::optional<StatsPageFigures> Read(SessionId session, DeviceIndex device,
                                       int64_t reserved) const ABSL_LOCKS_EXCLUDED(mu_);
  bool Has(SessionId session) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a read of the session's page was ever rejected.
  bool Rejected(SessionId session) const ABSL_LOCKS_EXCLUDED(mu_);
  // The sessions with a page.
  std::vector<SessionId> Sessions() const ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the session's page (its end); its counters stay in the device's
  // figures (RetiredLocalStats).
  void Remove(SessionId session) ABSL_LOCKS_EXCLUDED(mu_);
  // `device_stats` (the daemon's figures of `device` plus each page's part)
  // with what ended sessions' pages counted, and no peak below one reported
  // before.
  DeviceStats Settle(DeviceIndex device, const DeviceStats& device_stats) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What the daemon keeps of a page's figures for one device.
  struct DeviceBooks {
    std::optional<DeviceStats> last;  // the last plausible read
    DeviceStats carried;              // counters as they were before each reset
    DeviceStats device;               // the last read's part in the device's figures
  };
  struct Page {
    StatsPageInfo info;
    MemoryMapping mapping;  // read-only
    std::unique_ptr<StatsPageReader> reader;
    mutable std::atomic<bool> rejected{false};
    mutable absl::Mutex mu;
    mutable std::vector<DeviceBooks> devices ABSL_GUARDED_BY(mu);
  };

  MemoryFileTable* const memory_files_;
  const int device_count_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SessionId, std::shared_ptr<Page>> pages_ ABSL_GUARDED_BY(mu_);
  // Per device: the counters of ended sessions' pages (RetiredLocalStats),
  // and the highest peaks Settle reported.
  std::vector<DeviceStats> retired_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<DeviceStats> peak_floor_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
