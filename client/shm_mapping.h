#pragma once

// A host-backend segment: the POSIX shared-memory object the daemon created,
// mapped read-write by name (shm_open(name, O_RDWR) + mmap). The mapping stays
// valid after the daemon unlinks the object; destruction unmaps it.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/mapped_segment.h"

namespace gpumux {

class ShmMapping final : public MappedSegment {
 public:
  // Maps `size` bytes of the object `name`. INVALID_ARGUMENT for size 0 or an
  // empty name; errno-derived codes from shm_open/mmap otherwise (NOT_FOUND
  // when no such object exists, PERMISSION_DENIED when it is not ours to map),
  // the message naming the call and the object.
  static absl::StatusOr<std::unique_ptr<ShmMapping>> Open(const std::string& name, uint64_t size);

  ~ShmMapping() override;
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;

  void* base() const override { return base_; }
  uint64_t size() const override { return size_; }

 private:
  ShmMapping(void* base, uint64_t size) : base_(base), size_(size) {}

  void* const base_;
  const uint64_t size_;
};

}  // namespace gpumux
