#include "common/sealed_memory.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 40;
// What a receiver insists on: nobody may change the size under a mapping.
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

}  // namespace

absl::Status SystemCallError(int error_number, absl::string_view call) {
  const std::string message = absl::StrCat(call, ": ", std::strerror(error_number));
  switch (error_number) {
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(message);
    case EINVAL:
      return absl::InvalidArgumentError(message);
    default:
      return absl::ErrnoToStatus(error_number, message);
  }
}

MemoryMapping::~MemoryMapping() {
  if (data_ != nullptr) munmap(data_, size_);
}

MemoryMapping::MemoryMapping(MemoryMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MemoryMapping& MemoryMapping::operator=(MemoryMapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::StatusOr<SealedMemory> SealedMemory::Create(absl::string_view name, uint64_t size) {
  if (size == 0 || size > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory of ", size, " bytes: the size must be 1 byte to 1 TiB"));
  }
  const std::string label(name);
  UniqueFd fd(memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return SystemCallError(errno, absl::StrCat("memfd_create(", label, ")"));
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return SystemCallError(errno, absl::StrCat("ftruncate(", label, ", ", size, ")"));
  }
  // Every page now, so that no later access can find the memory missing.
  if (int error = posix_fallocate(fd.get(), 0, static_cast<off_t>(size)); error != 0) {
    return SystemCallError(error, absl::StrCat("fallocate(", label, ", ", size, " bytes)"));
  }
  if (fcntl(fd.get(), F_ADD_SEALS, kSizeSeals | F_SEAL_SEAL) != 0) {
    return SystemCallError(errno, absl::StrCat("sealing ", label));
  }
  return SealedMemory(std::move(fd), size);
}

absl::StatusOr<SealedMemory> SealedMemory::Adopt(UniqueFd fd, uint64_t expected_size) {
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the descriptor is not a sealable memory file: ", std::strerror(errno)));
  }
  if ((seals & kSizeSeals) != kSizeSeals) {
    return absl::InvalidArgumentError("the memory file is not sealed against shrinking and growing");
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return SystemCallError(errno, "fstat");
  if (static_cast<uint64_t>(st.st_size) != expected_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the memory file has ", st.st_size, " bytes, not the ", expected_size, " expected"));
  }
  return SealedMemory(std::move(fd), expected_size);
}

absl::StatusOr<MemoryMapping> SealedMemory::Map(bool writable) const {
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* data = mmap(nullptr, size_, protection, MAP_SHARED, fd_.get(), 0);
  if (data == MAP_FAILED) return SystemCallError(errno, absl::StrCat("mmap(", size_, " bytes)"));
  return MemoryMapping(data, size_);
}

}  // namespace gpumux
