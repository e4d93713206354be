#pragma once

// SegmentMapping: a segment's shared-memory object mapped read-write into the
// daemon, unmapped when the last owner goes. The host backend maps a segment
// on first use by a copy, memset or fill, and holds the mapping through a
// shared_ptr from every queued item, so releasing a segment never unmaps
// memory that work is still about to touch. (client/shm_mapping.h is the
// client's counterpart.) Immutable after creation; safe from any thread.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gpumux {

class SegmentMapping {
 public:
  // Maps `size` bytes of the object `name` (MAP_SHARED). errno-derived codes
  // (NOT_FOUND for a missing object) on failure.
  static absl::StatusOr<std::shared_ptr<SegmentMapping>> Map(const std::string& name, uint64_t size);
  ~SegmentMapping();
  SegmentMapping(const SegmentMapping&) = delete;
  SegmentMapping& operator=(const SegmentMapping&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  SegmentMapping(uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint8_t* data_;
  uint64_t size_;
};

}  // namespace gpumux
