#pragma once

// SegmentMapping: a segment's memory file mapped read-write into the daemon,
// unmapped when the last owner goes. The host backend maps a segment on
// first use by a copy, memset or fill, and holds the mapping through a
// shared_ptr from every queued item, so releasing a segment never unmaps
// memory that work is still about to touch. The file is sealed against
// resizing, so no client can make an access here fault. Immutable after
// creation; safe from any thread.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/sealed_memory.h"

namespace gpumux {

class SegmentMapping {
 public:
  // Maps all of `memory` (MAP_SHARED); mmap's errors.
  static absl::StatusOr<std::shared_ptr<SegmentMapping>> Map(const SealedMemory& memory);
  SegmentMapping(const SegmentMapping&) = delete;
  SegmentMapping& operator=(const SegmentMapping&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(mapping_.data()); }
  uint64_t size() const { return mapping_.size(); }

 private:
  explicit SegmentMapping(MemoryMapping mapping) : mapping_(std::move(mapping)) {}

  MemoryMapping mapping_;
};

}  // namespace gpumux
