#include "server/core/empty_every_cache.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/base/status_macros.h"

namespace gpumux {
namespace {

// No session asks: every holder is a candidate.
constexpr SessionId kOperator(0);

uint64_t Drop(const StatArray& was, const StatArray& is) {
  const int64_t less = was[kAggregate].current - is[kAggregate].current;
  return static_cast<uint64_t>(std::max<int64_t>(less, 0));
}

}  // namespace

absl::StatusOr<EmptyCacheResult> EmptyEveryCache(MemoryManager& memory, ClientQueries& queries,
                                                 std::optional<DeviceIndex> device,
                                                 absl::Time deadline) {
  if (device.has_value()) GPUMUX_RETURN_IF_ERROR(memory.CheckDevice(*device));
  EmptyCacheResult released;
  for (int d = 0; d < memory.device_count(); ++d) {
    const DeviceIndex on(d);
    if (device.has_value() && *device != on) continue;
    const std::vector<SessionId> holders =
        memory.PressureCandidates(kOperator, on, Shortage::kDevice);
    if (holders.empty()) continue;
    GPUMUX_ASSIGN_OR_RETURN(const DeviceStats before, memory.GetStats(on, std::nullopt));
    memory.AskToRelease(on, holders, [&] { queries.ReleaseCached(holders, on, deadline); });
    GPUMUX_ASSIGN_OR_RETURN(const DeviceStats after, memory.GetStats(on, std::nullopt));
    released.released_bytes += Drop(before.reserved_bytes, after.reserved_bytes);
    released.released_segments += Drop(before.segment, after.segment);
  }
  GPUMUX_ASSIGN_OR_RETURN(const EmptyCacheResult daemon_cache,
                          memory.EmptyCache(kOperator, device, /*all_sessions=*/true));
  released.released_bytes += daemon_cache.released_bytes;
  released.released_segments += daemon_cache.released_segments;
  return released;
}

}  // namespace gpumux
