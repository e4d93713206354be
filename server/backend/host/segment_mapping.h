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

// RangeMapping: an expandable segment's reserved range mapped into the
// daemon: address space reserved whole (no access, no memory), each page's
// memory file mapped at its offset when the page is mapped. An unmapped page
// turns into private scratch memory rather than a hole, so work queued on it
// before it was unmapped (a client's own misuse) writes into scratch and
// never faults the daemon. The reservation goes with the last owner (queued
// work holds a shared_ptr). Not thread-safe: the backend's device mutex
// guards Map and Scrub.
class RangeMapping {
 public:
  // Reserves `size` bytes of address space; mmap's errors.
  static absl::StatusOr<std::shared_ptr<RangeMapping>> Reserve(uint64_t size);
  ~RangeMapping();
  RangeMapping(const RangeMapping&) = delete;
  RangeMapping& operator=(const RangeMapping&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Maps all of `memory` (MAP_SHARED) at `offset`, replacing what is there.
  absl::Status Map(uint64_t offset, const SealedMemory& memory);
  // Replaces [offset, offset + bytes) with private zero-filled scratch.
  absl::Status Scrub(uint64_t offset, uint64_t bytes);

 private:
  RangeMapping(uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  uint64_t size_;
};

}  // namespace gpumux
