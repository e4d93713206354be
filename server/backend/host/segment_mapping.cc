#include "server/backend/host/segment_mapping.h"

#include <sys/mman.h>

#include <cerrno>
#include <utility>

#include "common/status_macros.h"

namespace gpumux {

absl::StatusOr<std::shared_ptr<SegmentMapping>> SegmentMapping::Map(const SealedMemory& memory) {
  GPUMUX_ASSIGN_OR_RETURN(MemoryMapping mapping, memory.Map());
  return std::shared_ptr<SegmentMapping>(new SegmentMapping(std::move(mapping)));
}

absl::StatusOr<std::shared_ptr<RangeMapping>> RangeMapping::Reserve(uint64_t size) {
  void* data = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (data == MAP_FAILED) return SystemCallError(errno, "mmap (reserving an expandable segment)");
  return std::shared_ptr<RangeMapping>(new RangeMapping(static_cast<uint8_t*>(data), size));
}

RangeMapping::~RangeMapping() { munmap(data_, size_); }

absl::Status RangeMapping::Map(uint64_t offset, const SealedMemory& memory) {
  void* at = mmap(data_ + offset, memory.size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                  memory.fd(), 0);
  if (at == MAP_FAILED) return SystemCallError(errno, "mmap (mapping a page)");
  return absl::OkStatus();
}

absl::Status RangeMapping::Scrub(uint64_t offset, uint64_t bytes) {
  void* at = mmap(data_ + offset, bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (at == MAP_FAILED) return SystemCallError(errno, "mmap (unmapping a page)");
  return absl::OkStatus();
}

}  // namespace gpumux
