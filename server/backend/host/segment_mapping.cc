#include "server/backend/host/segment_mapping.h"

#include <utility>

#include "common/base/status_macros.h"

namespace gpumux {

absl::StatusOr<std::shared_ptr<SegmentMapping>> SegmentMapping::Map(
    std::shared_ptr<const SealedMemory> memory) {
  GPUMUX_ASSIGN_OR_RETURN(MemoryMapping mapping, memory->Map());
  return std::shared_ptr<SegmentMapping>(new SegmentMapping(std::move(memory), std::move(mapping)));
}

}  // namespace gpumux
