#pragma once

// HostIpcEvent: an interprocess event of the host backend, living in a small
// POSIX shared-memory object so that any process holding its handle can
// record, query and wait on it without the daemon. Shared by the daemon's
// HostBackend and the client library.
//
// Layout (HostIpcEventBlock, 64 bytes): a magic word and version, then
// `recorded` and `completed` generation counters (std::atomic<uint64_t>, which
// are lock-free and address-free on every platform gpumux builds for), the
// CLOCK_MONOTONIC time of the latest completion, and a 32-bit futex word that
// completions bump. Recording takes the next generation; completing
// generation g raises `completed` to g if it is lower. A record counts as
// complete once `completed` reaches its generation, so when one event is
// re-recorded on another stream before its previous record completed, the
// later record completing also releases waiters on the earlier one.
//
// Waiting sleeps in futex(FUTEX_WAIT) on the separate 32-bit wake word (not
// on half of a 64-bit atomic, which C++ cannot alias), woken by every
// completion with FUTEX_WAKE. Each sleep is capped (kHostIpcEventWaitSlice)
// so a waiter notices a completer that died between its store and its wake,
// and so callers can give up.
//
// The handle is kHostIpcEventHandleBytes bytes: the 8-byte tag
// kHostIpcEventHandleTag, then the object name ('/' + at most 55 characters
// without '/'), zero-padded. Names are "<prefix>-<pid>-ev-<16 hex>", the
// pattern of the daemon's segment objects, so its start-up sweep also
// removes events left by processes that died.
//
// A HostIpcEvent object is thread-safe; the creating object unlinks the name
// when destroyed (processes that opened it keep their mapping).

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

  // Starts a record: returns its generation (1, 2, ...). The caller completes
  // it with Complete once the captured work has run.
  uint64_t Record();
  // Marks `generation` complete at `completed_at_ns` (CLOCK_MONOTONIC, i.e.
  // std::chrono::steady_clock on Linux) and wakes every waiter.
  void Complete(uint64_t generation, int64_t completed_at_ns);

  // The latest generation recorded; 0 when never recorded.
  uint64_t recorded() const;
  // True when `generation` (0: nothing) has completed.
  bool IsComplete(uint64_t generation) const;
  // True when never recorded or the latest record completed.
  bool Query() const { return IsComplete(recorded()); }
  // CLOCK_MONOTONIC nanoseconds of the latest completion; 0 before any.
  int64_t completed_at_ns() const;

  // Blocks until `generation` completed or `timeout` passed; true when it
  // completed. Sleeps in futex, at most kHostIpcEventWaitSlice at a time.
  bool WaitFor(uint64_t generation, std::chrono::nanoseconds timeout) const;
  // Blocks until `generation` completed.
  void Wait(uint64_t generation) const;

 private:
  HostIpcEvent(std::string name, HostIpcEventBlock* block, bool owner)
      : name_(std::move(name)), block_(block), owner_(owner) {}

  std::string name_;
  HostIpcEventBlock* block_;
  bool owner_;
};

}  // namespace gpumux
