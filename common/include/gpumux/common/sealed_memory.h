#pragma once

// SealedMemory: shared memory that whoever it is handed to can map but never
// break. It is an anonymous memory file (memfd_create: no name anyone can
// open), backed in full when it is created (fallocate), so running out of
// memory is an error at creation and never a SIGBUS at a later access, and
// sealed against shrinking, growing and further sealing, so no process
// holding the descriptor can truncate it under another's mapping. Descriptors
// travel to other processes with SendFds (common/ipc/fd_passing.h). MemoryMapping
// owns one mmap of it. This is the one place gpumux creates, checks and maps
// shared memory.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux {

// errno of a system call named `call` as a Status, the one translation of
// errno for shared memory: ENOMEM and ENOSPC are RESOURCE_EXHAUSTED, EPERM
// and EACCES PERMISSION_DENIED, EINVAL INVALID_ARGUMENT, the rest Abseil's
// mapping.
absl::Status SystemCallError(int error_number, absl::string_view call);

class MemoryMapping {
 public:
  MemoryMapping() = default;
  ~MemoryMapping();
  MemoryMapping(MemoryMapping&& other) noexcept;
  MemoryMapping& operator=(MemoryMapping&& other) noexcept;
  MemoryMapping(const MemoryMapping&) = delete;
  MemoryMapping& operator=(const MemoryMapping&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool mapped() const { return data_ != nullptr; }

 private:
  friend class SealedMemory;
  MemoryMapping(void* data, uint64_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

class SealedMemory;

// AddressReservation: address space reserved whole, with no access and no
// memory behind it, into which memory files are mapped at fixed offsets (an
// expandable segment's pages, in the daemon and in each client that maps
// them). Unmapped whole when destroyed. Not thread-safe: its owner
// serializes MapAt, Hole and Scratch.
class AddressReservation {
 public:
  // Reserves `size` bytes; mmap's errors.
  static absl::StatusOr<AddressReservation> Reserve(uint64_t size);
  AddressReservation() = default;
  ~AddressReservation();
  AddressReservation(AddressReservation&& other) noexcept;
  AddressReservation& operator=(AddressReservation&& other) noexcept;
  AddressReservation(const AddressReservation&) = delete;
  AddressReservation& operator=(const AddressReservation&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Maps all of `memory` shared, read-write, at `offset`, replacing what is
  // there. INVALID_ARGUMENT when it does not fit; mmap's errors.
  absl::Status MapAt(uint64_t offset, const SealedMemory& memory);
  // Turns [offset, offset + bytes) back into reserved space without access
  // (touching it faults), or into private zero-filled scratch memory that
  // late accesses may read and write harmlessly.
  absl::Status Hole(uint64_t offset, uint64_t bytes);
  absl::Status Scratch(uint64_t offset, uint64_t bytes);

 private:
  AddressReservation(char* data, uint64_t size) : data_(data), size_(size) {}
  absl::Status Replace(uint64_t offset, uint64_t bytes, int protection, const char* what);
  char* data_ = nullptr;
  uint64_t size_ = 0;
};

// The memory files (SealedMemory, created or adopted) this process may hold
// open at once: gpumuxd sets it from its descriptor limit, keeping the rest
// for connections and accepts, so no client can make it run out of
// descriptors by having it create files (each interprocess event, segment,
// staging buffer and stats page of the host backend holds one). `why` says
// where the number comes from, for the refusal's message. Unlimited until
// set.
void SetMemoryFileBudget(size_t budget, absl::string_view why);
// The memory files this process holds open now, and may (SIZE_MAX until
// SetMemoryFileBudget).
size_t OpenMemoryFiles();
size_t MemoryFileBudget();

class SealedMemory;

// `memory` shared, and discarded (SealedMemory::Discard) when its last
// holder in this process lets go, whatever other processes still hold: for
// memory whose owner's books end when this process releases it (gpumuxd's
// segments and pages), so that a descriptor or mapping a client kept cannot
// hold memory the books no longer count. A client's later writes to a kept
// file are its own memory, charged to it by the kernel.
std::shared_ptr<const SealedMemory> ShareDiscardedOnRelease(SealedMemory memory);

class SealedMemory {
 public:
  // A new memory file of `size` bytes (1 byte to 1 TiB), zero-filled, backed
  // and sealed. `name` shows in /proc/<pid>/fd and /proc/<pid>/maps only.
  // RESOURCE_EXHAUSTED when the memory is not there: more than MemAvailable
  // or the cgroup's headroom (checked first for files of 1 MiB and more, so
  // the kernel is not pushed to reclaim or kill for them), fallocate's ENOSPC or ENOMEM, the
  // memory file budget (SetMemoryFileBudget) or a descriptor limit; INVALID_ARGUMENT for a bad
  // size.
  static absl::StatusOr<SealedMemory> Create(absl::string_view name, uint64_t size);

  // A descriptor received from another process: INVALID_ARGUMENT unless it is
  // a memory file of exactly `expected_size` bytes sealed against shrinking
  // and growing, so mapping it can never fault later; RESOURCE_EXHAUSTED past
  // the memory file budget. Takes ownership.
  static absl::StatusOr<SealedMemory> Adopt(UniqueFd fd, uint64_t expected_size);

  SealedMemory(SealedMemory&&) = default;
  SealedMemory& operator=(SealedMemory&&) = default;

  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }

  // Maps all of it shared, read-write (or read-only). Errors: mmap's.
  absl::StatusOr<MemoryMapping> Map(bool writable = true) const;

  // Gives its pages back to the system now, whoever else holds the file:
  // they read as zeros from then on, in every mapping (a punched hole; the
  // file keeps its size and seals). Errors: fallocate's.
  absl::Status Discard() const;

 private:
  // One memory file counted against the budget, while it lives.
  class Counted {
   public:
    // RESOURCE_EXHAUSTED past the budget, naming `what`.
    static absl::StatusOr<Counted> Take(absl::string_view what);
    Counted() = default;
    ~Counted();
    Counted(Counted&& other) noexcept : held_(std::exchange(other.held_, false)) {}
    Counted& operator=(Counted&& other) noexcept;
    Counted(const Counted&) = delete;
    Counted& operator=(const Counted&) = delete;

   private:
    bool held_ = false;
  };

  SealedMemory(UniqueFd fd, uint64_t size, Counted counted)
      : counted_(std::move(counted)), fd_(std::move(fd)), size_(size) {}
  Counted counted_;
  UniqueFd fd_;
  uint64_t size_ = 0;
};

}  // namespace gpumux
