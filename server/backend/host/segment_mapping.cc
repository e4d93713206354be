#include "server/backend/host/segment_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "server/backend/host/shm_object.h"

namespace gpumux {

absl::StatusOr<std::shared_ptr<SegmentMapping>> SegmentMapping::Map(const std::string& name, uint64_t size) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open(", name, ")"));
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (mapped == MAP_FAILED) return ErrnoStatus(mmap_errno, absl::StrCat("mmap(", name, ")"));
  return std::shared_ptr<SegmentMapping>(new SegmentMapping(static_cast<uint8_t*>(mapped), size));
}

SegmentMapping::~SegmentMapping() { munmap(data_, size_); }

}  // namespace gpumux
