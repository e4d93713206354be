#include "common/host_ipc_event.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random_hex.h"

namespace gpumux {

// "GMXE" little-endian; bumped version on any layout change.
constexpr uint32_t kBlockMagic = 0x45584d47;
constexpr uint32_t kBlockVersion = 1;

// The shared layout. Every field is an atomic that works across processes:
// lock-free atomics are address-free, so two mappings at different addresses
// see one object.
struct HostIpcEventBlock {
  std::atomic<uint32_t> magic;  // kBlockMagic once initialised (release)
  uint32_t version;
  std::atomic<uint64_t> recorded;
  std::atomic<uint64_t> completed;
  std::atomic<int64_t> completed_at_ns;
  std::atomic<uint32_t> wake;  // futex word, bumped by every completion
  uint8_t reserved[28];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex needs a plain 32-bit word");
static_assert(sizeof(HostIpcEventBlock) == 64);

namespace {

// The object's exact size: no segment (a multiple of 512 bytes) has it, so a
// segment name passed as an event handle is rejected.
constexpr off_t kObjectBytes = sizeof(HostIpcEventBlock);

absl::Status Errno(int error_number, absl::string_view what) {
  return absl::ErrnoToStatus(error_number, what);
}

bool ValidName(absl::string_view name) {
  if (name.size() < 2 || name.size() > kHostIpcEventMaxNameBytes || name[0] != '/') return false;
  for (char c : name.substr(1)) {
    if (c == '/' || c <= ' ' || c > '~') return false;
  }
  return true;
}

absl::StatusOr<HostIpcEventBlock*> Map(int fd, const std::string& name) {
  void* mapped = mmap(nullptr, sizeof(HostIpcEventBlock), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) return Errno(errno, absl::StrCat("mmap(", name, ")"));
  return static_cast<HostIpcEventBlock*>(mapped);
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: waiters and wakers are in different processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostIpcEvent>> HostIpcEvent::Create(absl::string_view prefix) {
  if (prefix.size() < 2 || prefix[0] != '/' || prefix.find('/', 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interprocess event: prefix \"", prefix, "\" must be '/' followed by characters without '/'"));
  }
  std::string name = absl::StrCat(prefix, "-", getpid(), "-ev-", RandomHex(8));
  if (!ValidName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interprocess event: name \"", name, "\" does not fit the ", kHostIpcEventMaxNameBytes,
        " characters of a handle; use a shorter shared-memory prefix than \"", prefix, "\""));
  }
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0660);
  if (fd < 0) return Errno(errno, absl::StrCat("shm_open(", name, ")"));
  absl::Status status;
  if (fchmod(fd, 0660) != 0) {  // the umask narrows shm_open's mode
    status = Errno(errno, absl::StrCat("fchmod(", name, ")"));
  } else if (ftruncate(fd, kObjectBytes) != 0) {
    status = Errno(errno, absl::StrCat("ftruncate(", name, ")"));
  }
  absl::StatusOr<HostIpcEventBlock*> block =
      status.ok() ? Map(fd, name) : absl::StatusOr<HostIpcEventBlock*>(status);
  close(fd);
  if (!block.ok()) {
    shm_unlink(name.c_str());
    return block.status();
  }
  // ftruncate zero-filled the object, which is every counter's initial value;
  // publishing the magic last lets an opener trust the rest.
  (*block)->version = kBlockVersion;
  (*block)->magic.store(kBlockMagic, std::memory_order_release);
  return std::unique_ptr<HostIpcEvent>(new HostIpcEvent(std::move(name), *block, /*owner=*/true));
}

absl::StatusOr<std::unique_ptr<HostIpcEvent>> HostIpcEvent::Open(absl::string_view handle) {
  if (handle.size() != kHostIpcEventHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("interprocess event handle has ", handle.size(),
                                                   " bytes; expected ", kHostIpcEventHandleBytes));
  }
  if (handle.substr(0, kHostIpcEventHandleTag.size()) != kHostIpcEventHandleTag) {
    return absl::InvalidArgumentError(
        "interprocess event handle is not a host-backend event handle (wrong kind tag)");
  }
  absl::string_view padded = handle.substr(kHostIpcEventHandleTag.size());
  const size_t end = padded.find('\0');
  absl::string_view name_view = padded.substr(0, end);
  const bool zero_padded = end != absl::string_view::npos &&
                           padded.find_first_not_of('\0', end) == absl::string_view::npos;
  if (!zero_padded || !ValidName(name_view)) {
    return absl::InvalidArgumentError(
        "interprocess event handle holds no valid shared-memory name");
  }
  std::string name(name_view);
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          "interprocess event ", name, " does not exist (its creator destroyed it or exited)"));
    }
    return Errno(errno, absl::StrCat("shm_open(", name, ")"));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status status = Errno(errno, absl::StrCat("fstat(", name, ")"));
    close(fd);
    return status;
  }
  if (st.st_size != kObjectBytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory object ", name, " is not an interprocess event"));
  }
  absl::StatusOr<HostIpcEventBlock*> block = Map(fd, name);
  close(fd);
  if (!block.ok()) return block.status();
  if ((*block)->magic.load(std::memory_order_acquire) != kBlockMagic ||
      (*block)->version != kBlockVersion) {
    munmap(*block, sizeof(HostIpcEventBlock));
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory object ", name, " is not an interprocess event of layout version ",
        kBlockVersion));
  }
  return std::unique_ptr<HostIpcEvent>(new HostIpcEvent(std::move(name), *block, /*owner=*/false));
}

HostIpcEvent::~HostIpcEvent() {
  munmap(block_, sizeof(HostIpcEventBlock));
  if (owner_) shm_unlink(name_.c_str());
}

std::string HostIpcEvent::handle() const {
  std::string handle(kHostIpcEventHandleBytes, '\0');
  handle.replace(0, kHostIpcEventHandleTag.size(), kHostIpcEventHandleTag.data(),
                 kHostIpcEventHandleTag.size());
  handle.replace(kHostIpcEventHandleTag.size(), name_.size(), name_);
  return handle;
}

uint64_t HostIpcEvent::Record() {
  // acq_rel: a recorder in another process sees generations in one order.
  return block_->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
}

void HostIpcEvent::Complete(uint64_t generation, int64_t completed_at_ns) {
  uint64_t current = block_->completed.load(std::memory_order_acquire);
  while (current < generation) {
    // The time stamp goes first so whoever sees the new generation (acquire)
    // also sees a stamp at least this recent.
    block_->completed_at_ns.store(completed_at_ns, std::memory_order_relaxed);
    if (block_->completed.compare_exchange_weak(current, generation, std::memory_order_acq_rel,
                                                std::memory_order_acquire)) {
      break;
    }
  }
  block_->wake.fetch_add(1, std::memory_order_release);
  Futex(&block_->wake, FUTEX_WAKE, INT_MAX, nullptr);
}

uint64_t HostIpcEvent::recorded() const { return block_->recorded.load(std::memory_order_acquire); }

bool HostIpcEvent::IsComplete(uint64_t generation) const {
  return block_->completed.load(std::memory_order_acquire) >= generation;
}

int64_t HostIpcEvent::completed_at_ns() const {
  return block_->completed_at_ns.load(std::memory_order_acquire);
}

bool HostIpcEvent::WaitFor(uint64_t generation, std::chrono::nanoseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // Read the wake word before the condition: a completion between the two
    // changes the word, so FUTEX_WAIT returns at once instead of sleeping.
    const uint32_t seen = block_->wake.load(std::memory_order_acquire);
    if (IsComplete(generation)) return true;
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) return false;
    const auto slice = std::min<std::chrono::nanoseconds>(left, kHostIpcEventWaitSlice);
    timespec ts{static_cast<time_t>(slice.count() / 1000000000),
                static_cast<long>(slice.count() % 1000000000)};
    Futex(&block_->wake, FUTEX_WAIT, seen, &ts);  // EAGAIN, EINTR, ETIMEDOUT: re-check
  }
}

void HostIpcEvent::Wait(uint64_t generation) const {
  while (!WaitFor(generation, std::chrono::hours(1))) {
  }
}

}  // namespace gpumux
