#include "gpumux/common/sealed_memory.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 40;
// Below this a file cannot decide whether the machine runs out, and reading
// /proc for it would tax every interprocess event (a copy's completion
// event is one): only larger files are checked against what is available.
constexpr uint64_t kCheckAvailableFrom = uint64_t{1} << 20;
// What a receiver insists on: nobody may change the size under a mapping.
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

// The first unsigned number in the file at `path`; nullopt when it cannot
// be read or holds none ("max").
std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream file(path);
  uint64_t value = 0;
  if (file >> value) return value;
  return std::nullopt;
}

// What the cgroup this process is in still lets it use: limit - usage, for
// cgroup v2 ("0::/path" → memory.max, memory.current) or v1 ("N:memory:/path"
// → memory.limit_in_bytes, memory.usage_in_bytes, at that path or at the
// mount's root as inside a container). nullopt when unlimited or unknown.
std::optional<uint64_t> CgroupHeadroom() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::optional<uint64_t> limit, usage;
    if (controllers.empty()) {  // v2
      limit = ReadNumber("/sys/fs/cgroup" + path + "/memory.max");
      usage = ReadNumber("/sys/fs/cgroup" + path + "/memory.current");
    } else if (controllers == "memory") {  // v1
      for (const std::string& dir :
           {"/sys/fs/cgroup/memory" + path, std::string("/sys/fs/cgroup/memory")}) {
        limit = ReadNumber(dir + "/memory.limit_in_bytes");
        usage = ReadNumber(dir + "/memory.usage_in_bytes");
        if (limit.has_value() && usage.has_value()) break;
      }
    } else {
      continue;
    }
    // v1 says "no limit" with a number near 2^63.
    if (!limit.has_value() || !usage.has_value() || *limit >= (uint64_t{1} << 62))
      return std::nullopt;
    return *limit > *usage ? *limit - *usage : 0;
  }
  return std::nullopt;
}

// Bytes this process may still back: MemAvailable, or the cgroup's headroom
// when that is less. nullopt when neither can be read.
std::optional<uint64_t> AvailableMemoryBytes() {
  std::optional<uint64_t> available;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  }
  const std::optional<uint64_t> headroom = CgroupHeadroom();
  if (headroom.has_value() && (!available.has_value() || *headroom < *available))
    available = headroom;
  return available;
}

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

namespace {

// The budget and the count of open memory files (SetMemoryFileBudget).
std::atomic<size_t> memory_file_budget{std::numeric_limits<size_t>::max()};
std::atomic<size_t> open_memory_files{0};
absl::Mutex budget_reason_mu;
std::string& BudgetReason() {
  static std::string* reason = new std::string;
  return *reason;
}

}  // namespace

void SetMemoryFileBudget(size_t budget, absl::string_view why) {
  absl::MutexLock lock(&budget_reason_mu);
  BudgetReason() = std::string(why);
  memory_file_budget.store(budget);
}

size_t OpenMemoryFiles() { return open_memory_files.load(); }
size_t MemoryFileBudget() { return memory_file_budget.load(); }

absl::StatusOr<SealedMemory::Counted> SealedMemory::Counted::Take(absl::string_view what) {
  const size_t budget = memory_file_budget.load();
  size_t open = open_memory_files.load();
  do {
    if (open >= budget) {
      absl::MutexLock lock(&budget_reason_mu);
      return absl::ResourceExhaustedError(absl::StrCat(
          "no memory file for ", what, ": ", open, " are open, the most this process may hold (",
          BudgetReason(), "); memory already handed out must be freed first"));
    }
  } while (!open_memory_files.compare_exchange_weak(open, open + 1));
  Counted counted;
  counted.held_ = true;
  return counted;
}

SealedMemory::Counted::~Counted() {
  if (held_) open_memory_files.fetch_sub(1);
}

SealedMemory::Counted& SealedMemory::Counted::operator=(Counted&& other) noexcept {
  if (this != &other) {
    if (held_) open_memory_files.fetch_sub(1);
    held_ = std::exchange(other.held_, false);
  }
  return *this;
}

absl::StatusOr<SealedMemory> SealedMemory::Create(absl::string_view name, uint64_t size) {
  if (size == 0 || size > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory of ", size, " bytes: the size must be 1 byte to 1 TiB"));
  }
  const std::string label(name);
  GPUMUX_ASSIGN_OR_RETURN(Counted counted, Counted::Take(label));
  // Backing more than the machine (or the cgroup) has would not fail
  // cleanly: the kernel would reclaim, then kill. Refuse it up front.
  if (const std::optional<uint64_t> available =
          size >= kCheckAvailableFrom ? AvailableMemoryBytes() : std::nullopt;
      available.has_value() && size > *available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot back ", size, " bytes of shared memory (", label, "): only ",
                     *available, " bytes of memory are available to this process"));
  }
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
  return SealedMemory(std::move(fd), size, std::move(counted));
}

absl::StatusOr<SealedMemory> SealedMemory::Adopt(UniqueFd fd, uint64_t expected_size) {
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the descriptor is not a sealable memory file: ", std::strerror(errno)));
  }
  if ((seals & kSizeSeals) != kSizeSeals) {
    return absl::InvalidArgumentError(
        "the memory file is not sealed against shrinking and growing");
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return SystemCallError(errno, "fstat");
  if (static_cast<uint64_t>(st.st_size) != expected_size) {
    return absl::InvalidArgumentError(absl::StrCat("the memory file has ", st.st_size,
                                                   " bytes, not the ", expected_size, " expected"));
  }
  GPUMUX_ASSIGN_OR_RETURN(Counted counted, Counted::Take("a memory file received"));
  return SealedMemory(std::move(fd), expected_size, std::move(counted));
}

absl::StatusOr<MemoryMapping> SealedMemory::Map(bool writable) const {
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* data = mmap(nullptr, size_, protection, MAP_SHARED, fd_.get(), 0);
  if (data == MAP_FAILED) return SystemCallError(errno, absl::StrCat("mmap(", size_, " bytes)"));
  return MemoryMapping(data, size_);
}

absl::Status SealedMemory::Discard() const {
  if (fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                static_cast<off_t>(size_)) != 0) {
    return SystemCallError(errno, absl::StrCat("fallocate(punch ", size_, " bytes)"));
  }
  return absl::OkStatus();
}

std::shared_ptr<const SealedMemory> ShareDiscardedOnRelease(SealedMemory memory) {
  return std::shared_ptr<const SealedMemory>(
      new SealedMemory(std::move(memory)), [](const SealedMemory* released) {
        if (absl::Status discarded = released->Discard(); !discarded.ok()) {
          spdlog::warn("released memory file of {} bytes kept its pages: {}", released->size(),
                       std::string(discarded.message()));
        }
        delete released;
      });
}

absl::StatusOr<AddressReservation> AddressReservation::Reserve(uint64_t size) {
  void* data = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (data == MAP_FAILED) {
    return SystemCallError(errno, absl::StrCat("mmap(", size, " bytes of address space)"));
  }
  return AddressReservation(static_cast<char*>(data), size);
}

AddressReservation::~AddressReservation() {
  if (data_ != nullptr) munmap(data_, size_);
}

AddressReservation::AddressReservation(AddressReservation&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AddressReservation& AddressReservation::operator=(AddressReservation&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::Status AddressReservation::MapAt(uint64_t offset, const SealedMemory& memory) {
  if (offset > size_ || memory.size() > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("a memory file of ", memory.size(),
                                                   " bytes does not fit at offset ", offset,
                                                   " of a reservation of ", size_));
  }
  void* at = mmap(data_ + offset, memory.size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                  memory.fd(), 0);
  if (at == MAP_FAILED) return SystemCallError(errno, "mmap (a page at its offset)");
  return absl::OkStatus();
}

absl::Status AddressReservation::Replace(uint64_t offset, uint64_t bytes, int protection,
                                         const char* what) {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes, " bytes at offset ", offset, " run past a reservation of ", size_));
  }
  void* at = mmap(data_ + offset, bytes, protection,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (at == MAP_FAILED) return SystemCallError(errno, what);
  return absl::OkStatus();
}

absl::Status AddressReservation::Hole(uint64_t offset, uint64_t bytes) {
  return Replace(offset, bytes, PROT_NONE, "mmap (unmapping pages)");
}

absl::Status AddressReservation::Scratch(uint64_t offset, uint64_t bytes) {
  return Replace(offset, bytes, PROT_READ | PROT_WRITE, "mmap (scratch over unmapped pages)");
}

}  // namespace gpumux
