#pragma once

// HostIpcEvent: an interprocess event of the host backend, living in a small
// POSIX shared-memory object so that any process holding its handle can
// record, query and wait on it without the daemon. Shared by the daemon's
// HostBackend and the client library.
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
// kHostIpcEventHandleTag, then the object name ('/' + at most 55 characters
// without '/'), zero-padded. Names are "<prefix>-<pid>-ev-<16 hex>", the
// pattern of the daemon's segment objects, so its start-up sweep also
// removes events left by processes that died.
//
// A HostIpcEvent object is thread-safe; the creating object unlinks the name
// when destroyed (processes that opened it keep their mapping).

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

inline constexpr size_t kHostIpcEventHandleBytes = 64;
inline constexpr absl::string_view kHostIpcEventHandleTag{"gmxhev1\0", 8};
// Longest object name a handle holds (56 bytes after the tag, NUL-padded).
inline constexpr size_t kHostIpcEventMaxNameBytes = kHostIpcEventHandleBytes - 8 - 1;
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

class HostIpcEvent {
 public:
  // Creates a new event object "<prefix>-<pid>-ev-<16 hex>" (mode 0660),
  // never recorded. INVALID_ARGUMENT when `prefix` is not '/' plus
  // characters without '/', or the name would not fit a handle (prefix of at
  // most 27 characters); errno-derived codes for shm failures.
  static absl::StatusOr<std::unique_ptr<HostIpcEvent>> Create(absl::string_view prefix);

  // Opens the event named by `handle`. INVALID_ARGUMENT for a handle that is
  // not kHostIpcEventHandleBytes long, lacks the tag, holds a malformed name,
  // or names an object that is not an event of this layout version;
  // NOT_FOUND when no such object exists (any more).
  static absl::StatusOr<std::unique_ptr<HostIpcEvent>> Open(absl::string_view handle);

  // Unmaps the block; unlinks the name when this object created it.
  ~HostIpcEvent();
  HostIpcEvent(const HostIpcEvent&) = delete;
  HostIpcEvent& operator=(const HostIpcEvent&) = delete;

  const std::string& name() const { return name_; }
  bool owner() const { return owner_; }
  // The kHostIpcEventHandleBytes-byte handle.
  std::string handle() const;

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

  HostIpcEvent(std::string name, HostIpcEventBlock* block, bool owner)
      : name_(std::move(name)), block_(block), owner_(owner) {}

  std::string name_;
  HostIpcEventBlock* block_;
  bool owner_;
};

}  // namespace gpumux
