#pragma once

// SegmentMapping: a segment's memory file mapped read-write into the daemon,
// unmapped when the last owner goes. The host backend maps a segment on
// first use by a copy, memset or fill, and holds the mapping through a
// shared_ptr from every queued item, so releasing a segment never unmaps
// memory that work is still about to touch. It holds the file too, whose
// pages go back to the system only once the file's last holder in the daemon
// let go (ShareDiscardedOnRelease): work queued before a release still
// reads and writes the memory. The file is sealed against resizing, so no
// client can make an access here fault. Immutable after
// creation; safe from any thread.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "gpumux/common/sealed_memory.h"

namespace gpumux {

class SegmentMapping {
 public:
  // Maps all of `memory` (MAP_SHARED) and holds it; mmap's errors.
  static absl::StatusOr<std::shared_ptr<SegmentMapping>> Map(
      std::shared_ptr<const SealedMemory> memory);
  SegmentMapping(const SegmentMapping&) = delete;
  SegmentMapping& operator=(const SegmentMapping&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(mapping_.data()); }
  uint64_t size() const { return mapping_.size(); }

 private:
  SegmentMapping(std::shared_ptr<const SealedMemory> memory, MemoryMapping mapping)
      : memory_(std::move(memory)), mapping_(std::move(mapping)) {}

  std::shared_ptr<const SealedMemory> memory_;
  MemoryMapping mapping_;  // unmapped before memory_ goes
};

}  // namespace gpumux
