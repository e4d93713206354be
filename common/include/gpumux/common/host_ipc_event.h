#pragma once

// HostIpcEvent: an interprocess event of the host backend, living in a small
// sealed memory file (gpumux/common/sealed_memory.h) so that any process holding it
// can record, query and wait on it without the daemon. Shared by the daemon's
// HostBackend and the client library. The daemon creates every event; a
// session that holds the event's handle fetches the memory file from the
// daemon's memory socket (common/ipc/memory_socket.h) and adopts it here.
//
// Layout (HostIpcEventBlock, 64 bytes): a magic word and version, then
// `recorded` and `completed` generation counters (std::atomic<uint64_t>, which
// are lock-free and address-free on every platform gpumux builds for), the
// CLOCK_MONOTONIC time of the latest completion, a 32-bit futex word that
// completions bump, and who made the latest record (its pid and pid
// namespace, each tagged with the record's generation). Recording takes the
// next generation; completing generation g raises `completed` to g if it is
// lower. A record counts as complete once `completed` reaches its
// generation, so when one event is re-recorded on another stream before its
// previous record completed, the later record completing also releases
// waiters on the earlier one.
//
// Abandoned records: a process that records and then dies (killed, crashed)
// before its work completes the record leaves it pending forever. So every
// query and wait also judges the latest record: when the process that made it
// no longer exists (kill(pid, 0) fails with ESRCH), the record is abandoned
// and counts as complete, and the call that finds out completes it on the
// dead process's behalf (so the finding sticks, even once the pid is reused)
// and reports kAbandoned so its caller can log it. Only the latest record is
// judged: an earlier one completes with it. A record is never judged
// abandoned when the recorder's pid namespace differs from the judge's (or
// either is unknown, without /proc): its pid means nothing here. A recorder
// that is a zombie counts as alive until its parent reaps it, and one killed
// in the few instructions between taking a generation and stamping its pid
// leaves that record pending as before.
//
// Waiting sleeps in futex(FUTEX_WAIT) on the separate 32-bit wake word (not
// on half of a 64-bit atomic, which C++ cannot alias), woken by every
// completion with FUTEX_WAKE. Each sleep is capped (kHostIpcEventWaitSlice)
// so a waiter notices a completer that died between its store and its wake,
// or a recorder that died, and so callers can give up.
//
// The handle is kHostIpcEventHandleBytes bytes: the 8-byte tag
// kHostIpcEventHandleTag, then the 32 lowercase hex digits of the key the
// daemon filed the event's memory file under, zero-padded. It names the
// event to the daemon only: nothing in the file system can be opened with
// it, and only an authenticated session can fetch the file it names.
//
// The block is writable by every process that holds it, so nothing here
// trusts its contents beyond reading them: garbage written into it changes
// what its own waiters see, never this process's memory safety.
//
// A HostIpcEvent object is thread-safe; it unmaps and closes its memory file
// when destroyed (other processes holding the file keep it).

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpumux/common/sealed_memory.h"

namespace gpumux {

inline constexpr size_t kHostIpcEventHandleBytes = 64;
inline constexpr absl::string_view kHostIpcEventHandleTag{"gmxhev2\0", 8};
// Hex digits of the key in a handle.
inline constexpr size_t kHostIpcEventKeyChars = 32;
// The exact size of an event's memory file: no segment (a multiple of 512
// bytes) or staging buffer has it.
inline constexpr uint64_t kHostIpcEventFileBytes = 64;
// Longest sleep of one futex wait before the waiter re-checks.
inline constexpr std::chrono::milliseconds kHostIpcEventWaitSlice{20};

struct HostIpcEventBlock;

// What a query or wait found about one record.
enum class HostIpcRecordState {
  // Not complete: its recorder is alive (or cannot be judged), or the wait
  // timed out.
  kPending,
  // Complete: by the recorder's work, by a later record, or by an earlier
  // finding that it was abandoned.
  kCompleted,
  // Counted complete because this very call found the latest record's
  // recorder gone and completed the record on its behalf. Reported once, to
  // that call; later calls see kCompleted.
  kAbandoned,
};

// Which record a kAbandoned result completed, and who had made it.
struct HostIpcAbandonedRecord {
  uint64_t generation = 0;
  pid_t recorder = 0;
};

// The handle of the event filed under `key` (kHostIpcEventKeyChars hex
// digits, as MemoryFileTable hands out).
std::string MakeHostIpcEventHandle(absl::string_view key);

// The key `handle` holds. INVALID_ARGUMENT, saying what is wrong, for a
// handle that is not kHostIpcEventHandleBytes long, lacks the tag, or holds
// no key of 32 lowercase hex digits followed by zeros.
absl::StatusOr<std::string> HostIpcEventKey(absl::string_view handle);

class HostIpcEvent {
 public:
  // Creates a new event in a new memory file, never recorded. `label` names
  // it in log lines and /proc. RESOURCE_EXHAUSTED when memory or
  // descriptors run out.
  static absl::StatusOr<std::unique_ptr<HostIpcEvent>> Create(absl::string_view label);

  // The event in `memory`, a memory file received from the daemon (or from
  // a process that created it). INVALID_ARGUMENT when it is not
  // kHostIpcEventFileBytes long or holds no event of this layout version.
  static absl::StatusOr<std::unique_ptr<HostIpcEvent>> Adopt(SealedMemory memory,
                                                             absl::string_view label);

  // Unmaps the block and closes the file.
  ~HostIpcEvent();
  HostIpcEvent(const HostIpcEvent&) = delete;
  HostIpcEvent& operator=(const HostIpcEvent&) = delete;

  const std::string& name() const { return name_; }
  // The memory file, to hand to other processes (its descriptor).
  const std::shared_ptr<const SealedMemory>& memory() const { return memory_; }

  // Starts a record: returns its generation (1, 2, ...) and stamps this
  // process as its recorder. The caller completes it with Complete once the
  // captured work has run.
  uint64_t Record();
  // Marks `generation` complete at `completed_at_ns` (CLOCK_MONOTONIC, i.e.
  // std::chrono::steady_clock on Linux) and wakes every waiter.
  void Complete(uint64_t generation, int64_t completed_at_ns);

  // The latest generation recorded; 0 when never recorded.
  uint64_t recorded() const;
  // The pid that made the latest record, as stamped; 0 when never recorded or
  // not stamped yet. For log messages: a later record may change it any time.
  pid_t recorder_pid() const;

  // Whether `generation` (0: nothing) has completed, judging the latest
  // record abandoned when its recorder is gone (see the header comment).
  // Never blocks. Writes the shared block only to complete an abandoned
  // record; on kAbandoned fills `*abandoned` when given.
  HostIpcRecordState Check(uint64_t generation, HostIpcAbandonedRecord* abandoned = nullptr) const;
  // Check, as a yes/no: an abandoned record counts as complete.
  bool IsComplete(uint64_t generation) const {
    return Check(generation) != HostIpcRecordState::kPending;
  }
  // True when never recorded or the latest record completed (or was abandoned).
  bool Query() const { return IsComplete(recorded()); }
  // CLOCK_MONOTONIC nanoseconds of the latest completion; 0 before any. For a
  // record completed as abandoned, when that was found out.
  int64_t completed_at_ns() const;

  // Blocks until `generation` completed (or was found abandoned) or `timeout`
  // passed; kPending on timeout. Sleeps in futex, at most
  // kHostIpcEventWaitSlice at a time, checking again after each sleep.
  HostIpcRecordState Await(uint64_t generation, std::chrono::nanoseconds timeout,
                           HostIpcAbandonedRecord* abandoned = nullptr) const;
  // Await, as a yes/no: true when it completed or was abandoned. A waiter
  // that needs what the recorder's work produces (say, bytes it copies), not
  // just its end, calls Await and treats kAbandoned as a failure instead.
  bool WaitFor(uint64_t generation, std::chrono::nanoseconds timeout) const {
    return Await(generation, timeout) != HostIpcRecordState::kPending;
  }
  // Blocks until `generation` completed or was abandoned; says which.
  HostIpcRecordState Wait(uint64_t generation, HostIpcAbandonedRecord* abandoned = nullptr) const;

 private:
  // Raises `completed` to `generation` and wakes every waiter; true when this
  // call raised it (it was lower).
  bool RaiseCompleted(uint64_t generation, int64_t completed_at_ns) const;
  // The pid of the process that made record `latest` (the latest) when that
  // process is gone; 0 when it lives or cannot be judged.
  pid_t GoneRecorder(uint64_t latest) const;

  HostIpcEvent(std::string name, std::shared_ptr<const SealedMemory> memory, MemoryMapping mapping);

  std::string name_;
  std::shared_ptr<const SealedMemory> memory_;
  MemoryMapping mapping_;
  HostIpcEventBlock* block_;
};

}  // namespace gpumux
