#include "gpumux/common/host_ipc_event.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gpumux {

// "GMXE" little-endian; bumped version on any layout change that older
// code would misread. The recorder stamps took reserved bytes without a bump:
// older code leaves them alone (so its records are never judged abandoned:
// their stamps' generations do not match) and never reads them.
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
  uint32_t unused;
  // Stamps of the latest record's recorder, each (value << 32 | the low 32
  // bits of the record's generation): the generation ties the two words,
  // written one after the other, to one record. A stamp only ever moves to a
  // later generation.
  std::atomic<uint64_t> recorder_pid;
  std::atomic<uint64_t> recorder_pid_namespace;  // inode of /proc/self/ns/pid; 0: unknown
  uint8_t reserved[8];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex needs a plain 32-bit word");
static_assert(sizeof(HostIpcEventBlock) == kHostIpcEventFileBytes);
static_assert(offsetof(HostIpcEventBlock, wake) == 32 &&
                  offsetof(HostIpcEventBlock, recorder_pid) == 40,
              "version 1 fields keep their offsets");

namespace {

bool IsLowerHex(absl::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// This process's pid and pid namespace inode (0 when /proc cannot tell),
// packed as pid << 32 | inode. Cached, and read again after a fork (the pid
// changed): a child may be in another pid namespace than its parent.
uint64_t SelfIdentity() {
  static std::atomic<uint64_t> cached{0};  // relaxed: a stale or racing read only costs a stat
  const uint32_t pid = static_cast<uint32_t>(getpid());
  const uint64_t seen = cached.load(std::memory_order_relaxed);
  if (seen != 0 && static_cast<uint32_t>(seen >> 32) == pid) return seen;
  struct stat st;
  // Namespace inodes are 32-bit (the kernel's proc_inum).
  const uint32_t inode = stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
  const uint64_t identity = uint64_t{pid} << 32 | inode;
  cached.store(identity, std::memory_order_relaxed);
  return identity;
}

uint64_t PackStamp(uint32_t value, uint64_t generation) {
  return uint64_t{value} << 32 | static_cast<uint32_t>(generation);
}
uint32_t StampValue(uint64_t stamp) { return static_cast<uint32_t>(stamp >> 32); }
uint32_t StampTag(uint64_t stamp) { return static_cast<uint32_t>(stamp); }

// Stores `value` for `generation` unless the word already holds a later
// generation's (a recorder that took a later generation stamped first).
void Stamp(std::atomic<uint64_t>* word, uint32_t value, uint64_t generation) {
  const uint64_t stamp = PackStamp(value, generation);
  uint64_t current = word->load(std::memory_order_acquire);
  // Serial-number order on the 32-bit tags: fine while fewer than 2^31
  // records overtake one stamp, i.e. always.
  while (static_cast<int32_t>(StampTag(stamp) - StampTag(current)) > 0) {
    if (word->compare_exchange_weak(current, stamp, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return;
    }
  }
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: waiters and wakers are in different processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

std::string MakeHostIpcEventHandle(absl::string_view key) {
  std::string handle(kHostIpcEventHandleBytes, '\0');
  handle.replace(0, kHostIpcEventHandleTag.size(), kHostIpcEventHandleTag.data(),
                 kHostIpcEventHandleTag.size());
  handle.replace(kHostIpcEventHandleTag.size(), key.size(), key.data(), key.size());
  return handle;
}

absl::StatusOr<std::string> HostIpcEventKey(absl::string_view handle) {
  if (handle.size() != kHostIpcEventHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("interprocess event handle has ", handle.size(),
                                                   " bytes; expected ", kHostIpcEventHandleBytes));
  }
  if (handle.substr(0, kHostIpcEventHandleTag.size()) != kHostIpcEventHandleTag) {
    return absl::InvalidArgumentError(
        "interprocess event handle is not a host-backend event handle (wrong kind tag)");
  }
  absl::string_view key = handle.substr(kHostIpcEventHandleTag.size(), kHostIpcEventKeyChars);
  absl::string_view padding = handle.substr(kHostIpcEventHandleTag.size() + kHostIpcEventKeyChars);
  if (!IsLowerHex(key) || padding.find_first_not_of('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("interprocess event handle holds no key of ",
                                                   kHostIpcEventKeyChars,
                                                   " hex digits followed by zeros"));
  }
  return std::string(key);
}

HostIpcEvent::HostIpcEvent(std::string name, std::shared_ptr<const SealedMemory> memory,
                           MemoryMapping mapping)
    : name_(std::move(name)),
      memory_(std::move(memory)),
      mapping_(std::move(mapping)),
      block_(static_cast<HostIpcEventBlock*>(mapping_.data())) {}

absl::StatusOr<std::unique_ptr<HostIpcEvent>> HostIpcEvent::Create(absl::string_view label) {
  GPUMUX_ASSIGN_OR_RETURN(SealedMemory memory, SealedMemory::Create(label, kHostIpcEventFileBytes));
  GPUMUX_ASSIGN_OR_RETURN(MemoryMapping mapping, memory.Map());
  auto* block = static_cast<HostIpcEventBlock*>(mapping.data());
  // The new file reads as zeros, every counter's initial value; publishing
  // the magic last lets an adopter trust the rest.
  block->version = kBlockVersion;
  block->magic.store(kBlockMagic, std::memory_order_release);
  return std::unique_ptr<HostIpcEvent>(
      new HostIpcEvent(std::string(label), std::make_shared<const SealedMemory>(std::move(memory)),
                       std::move(mapping)));
}

absl::StatusOr<std::unique_ptr<HostIpcEvent>> HostIpcEvent::Adopt(SealedMemory memory,
                                                                  absl::string_view label) {
  if (memory.size() != kHostIpcEventFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a memory file of ", memory.size(),
                                                   " bytes is not an interprocess event (",
                                                   kHostIpcEventFileBytes, " bytes)"));
  }
  GPUMUX_ASSIGN_OR_RETURN(MemoryMapping mapping, memory.Map());
  auto* block = static_cast<HostIpcEventBlock*>(mapping.data());
  if (block->magic.load(std::memory_order_acquire) != kBlockMagic ||
      block->version != kBlockVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory file ", label, " holds no interprocess event of layout version ", kBlockVersion));
  }
  return std::unique_ptr<HostIpcEvent>(
      new HostIpcEvent(std::string(label), std::make_shared<const SealedMemory>(std::move(memory)),
                       std::move(mapping)));
}

HostIpcEvent::~HostIpcEvent() = default;

uint64_t HostIpcEvent::Record() {
  // acq_rel: a recorder in another process sees generations in one order.
  const uint64_t generation = block_->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
  // Stamped right after: a waiter that reads the new generation before both
  // stamps carry it does not judge the record yet.
  const uint64_t self = SelfIdentity();
  Stamp(&block_->recorder_pid, StampValue(self), generation);
  Stamp(&block_->recorder_pid_namespace, static_cast<uint32_t>(self), generation);
  return generation;
}

void HostIpcEvent::Complete(uint64_t generation, int64_t completed_at_ns) {
  RaiseCompleted(generation, completed_at_ns);
}

bool HostIpcEvent::RaiseCompleted(uint64_t generation, int64_t completed_at_ns) const {
  bool raised = false;
  uint64_t current = block_->completed.load(std::memory_order_acquire);
  while (current < generation) {
    // The time stamp goes first so whoever sees the new generation (acquire)
    // also sees a stamp at least this recent.
    block_->completed_at_ns.store(completed_at_ns, std::memory_order_relaxed);
    if (block_->completed.compare_exchange_weak(current, generation, std::memory_order_acq_rel,
                                                std::memory_order_acquire)) {
      raised = true;
      break;
    }
  }
  block_->wake.fetch_add(1, std::memory_order_release);
  Futex(&block_->wake, FUTEX_WAKE, INT_MAX, nullptr);
  return raised;
}

uint64_t HostIpcEvent::recorded() const { return block_->recorded.load(std::memory_order_acquire); }

pid_t HostIpcEvent::recorder_pid() const {
  const uint64_t stamp = block_->recorder_pid.load(std::memory_order_acquire);
  if (StampTag(stamp) != static_cast<uint32_t>(recorded())) return 0;
  return static_cast<pid_t>(StampValue(stamp));
}

pid_t HostIpcEvent::GoneRecorder(uint64_t latest) const {
  const uint64_t pid_stamp = block_->recorder_pid.load(std::memory_order_acquire);
  const uint64_t namespace_stamp = block_->recorder_pid_namespace.load(std::memory_order_acquire);
  const uint32_t tag = static_cast<uint32_t>(latest);
  // Not stamped yet (or by code older than the stamps): cannot judge.
  if (StampTag(pid_stamp) != tag || StampTag(namespace_stamp) != tag) return 0;
  const uint32_t recorder_namespace = StampValue(namespace_stamp);
  if (recorder_namespace == 0 || recorder_namespace != static_cast<uint32_t>(SelfIdentity())) {
    return 0;  // another (or an unknown) pid namespace: its pid is not ours to judge
  }
  const pid_t pid = static_cast<pid_t>(StampValue(pid_stamp));
  // EPERM (another user's process) means it exists.
  return pid > 0 && kill(pid, 0) == -1 && errno == ESRCH ? pid : 0;
}

HostIpcRecordState HostIpcEvent::Check(uint64_t generation,
                                       HostIpcAbandonedRecord* abandoned) const {
  if (block_->completed.load(std::memory_order_acquire) >= generation) {
    return HostIpcRecordState::kCompleted;
  }
  const uint64_t latest = recorded();
  if (latest < generation) return HostIpcRecordState::kPending;
  const pid_t gone = GoneRecorder(latest);
  if (gone == 0) return HostIpcRecordState::kPending;
  // Completing `latest` (not whatever is latest by now) is right even when a
  // live process recorded again meanwhile: that later record stays pending.
  if (RaiseCompleted(latest, SteadyNowNs())) {
    if (abandoned != nullptr) *abandoned = HostIpcAbandonedRecord{latest, gone};
    return HostIpcRecordState::kAbandoned;
  }
  // Someone else completed it (or found it abandoned) first.
  return block_->completed.load(std::memory_order_acquire) >= generation
             ? HostIpcRecordState::kCompleted
             : HostIpcRecordState::kPending;
}

int64_t HostIpcEvent::completed_at_ns() const {
  return block_->completed_at_ns.load(std::memory_order_acquire);
}

HostIpcRecordState HostIpcEvent::Await(uint64_t generation, std::chrono::nanoseconds timeout,
                                       HostIpcAbandonedRecord* abandoned) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // Read the wake word before the condition: a completion between the two
    // changes the word, so FUTEX_WAIT returns at once instead of sleeping.
    const uint32_t seen = block_->wake.load(std::memory_order_acquire);
    const HostIpcRecordState state = Check(generation, abandoned);
    if (state != HostIpcRecordState::kPending) return state;
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) return HostIpcRecordState::kPending;
    const auto slice = std::min<std::chrono::nanoseconds>(left, kHostIpcEventWaitSlice);
    timespec ts{static_cast<time_t>(slice.count() / 1000000000),
                static_cast<long>(slice.count() % 1000000000)};
    Futex(&block_->wake, FUTEX_WAIT, seen, &ts);  // EAGAIN, EINTR, ETIMEDOUT: re-check
  }
}

HostIpcRecordState HostIpcEvent::Wait(uint64_t generation,
                                      HostIpcAbandonedRecord* abandoned) const {
  while (true) {
    const HostIpcRecordState state = Await(generation, std::chrono::hours(1), abandoned);
    if (state != HostIpcRecordState::kPending) return state;
  }
}

}  // namespace gpumux
