#pragma once

// EmptyEveryCache: `gpumux empty-cache`, an operator's torch.cuda.empty_cache()
// for the whole daemon (Admin.EmptyCache).

#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allocator/caching_allocator.h"
#include "gpumux/common/ids.h"
#include "server/core/client_queries.h"
#include "server/core/memory_manager.h"

namespace gpumux {

// Releases every session's cached, unused segments on `device` (every
// device when nullopt): the daemon's own caches, and what local clients
// cache in their processes, which are asked to return it as under pressure
// and waited for until `deadline`. What left the device's books counts as
// released. INVALID_ARGUMENT for a device out of range. Blocks: not on a
// gRPC thread.
absl::StatusOr<EmptyCacheResult> EmptyEveryCache(MemoryManager& memory, ClientQueries& queries,
                                                 std::optional<DeviceIndex> device,
                                                 absl::Time deadline);

}  // namespace gpumux
