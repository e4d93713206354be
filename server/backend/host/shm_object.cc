#include "server/backend/host/shm_object.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace gpumux {

absl::Status ErrnoStatus(int error_number, absl::string_view what) {
  return absl::ErrnoToStatus(error_number, what);
}

absl::Status CreateShmObject(const std::string& name, uint64_t size) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0660);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open(", name, ")"));
  absl::Status status;
  // The umask narrows shm_open's mode (0660 would become 0640 under 022);
  // fchmod sets exactly the group access that lets same-group clients map it.
  if (fchmod(fd, 0660) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("fchmod(", name, ")"));
  } else if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("ftruncate(", name, ", ", size, ")"));
  }
  close(fd);
  if (!status.ok()) shm_unlink(name.c_str());
  return status;
}

absl::Status UnlinkShmObject(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("shm_unlink(", name, ")"));
  }
  return absl::OkStatus();
}

}  // namespace gpumux
