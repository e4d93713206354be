#include "client/shm_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace gpumux {

absl::StatusOr<std::unique_ptr<ShmMapping>> ShmMapping::Open(const std::string& name,
                                                             uint64_t size) {
  if (name.empty()) return absl::InvalidArgumentError("shared-memory segment handle has no name");
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot map shared-memory segment ", name, " of size 0"));
  }
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ")"));
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int mmap_errno = errno;
  // The mapping keeps the object alive; the descriptor is no longer needed.
  close(fd);
  if (base == MAP_FAILED) {
    return absl::ErrnoToStatus(mmap_errno, absl::StrCat("mmap(", name, ", ", size, ")"));
  }
  return std::unique_ptr<ShmMapping>(new ShmMapping(base, size));
}

ShmMapping::~ShmMapping() { munmap(base_, size_); }

}  // namespace gpumux
