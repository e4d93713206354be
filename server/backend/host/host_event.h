#pragma once

// HostEvent: the host backend's event, a completion marker that streams
// record and wait on. A record takes the next generation and queues an item
// that completes it; an event is complete for generation g once its
// completed generation reaches g (so, as in HostIpcEvent, a later record
// completing also releases an earlier one still pending on another stream).
// Plain events keep that state in this process under a mutex; interprocess
// events keep it in a HostIpcEvent, where other processes record and wait
// too. An interprocess record whose recorder process died before completing
// it counts as complete (HostIpcEvent's abandoned records); the HostEvent
// that finds out logs a warning naming the event and the process. Thread-
// safe; shared (shared_ptr) by the backend's handle table and every queued
// item that records or waits on it, so destroying the handle never disturbs
// queued work.
//
// Waiters let a stream park on a record instead of blocking a thread in
// Wait: Complete calls the waiters of every generation it completes. An
// interprocess record can also complete elsewhere (another process, another
// HostEvent over the same object, a dead recorder): that calls no waiter, so
// whoever parks on an interprocess event also polls it (HostIpcWaitWatcher).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/common/host_ipc_event.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"

namespace gpumux {

class HostEvent {
 public:
  using Waiter = absl::AnyInvocable<void() &&>;

  // A plain event (flags.interprocess is ignored).
  HostEvent(DeviceIndex device, EventFlags flags);
  // An interprocess event over `ipc` (created here, or another event of this
  // backend opened from `handle`, sharing its block).
  HostEvent(DeviceIndex device, EventFlags flags, std::shared_ptr<HostIpcEvent> ipc,
            std::string handle);

  DeviceIndex device() const { return device_; }
  const EventFlags& flags() const { return flags_; }
  // Null for a plain event.
  const HostIpcEvent* ipc() const { return ipc_.get(); }
  const std::shared_ptr<HostIpcEvent>& shared_ipc() const { return ipc_; }
  // The interprocess handle; empty for a plain event.
  const std::string& ipc_handle() const { return ipc_handle_; }

  // Starts a record; returns its generation (>= 1).
  uint64_t Record();
  // Completes `generation`, stamped with the steady clock now.
  void Complete(uint64_t generation);

  // The latest generation recorded (by any process); 0 when never recorded.
  uint64_t recorded() const;
  // True when `generation` completed, or (interprocess) was abandoned by a
  // recorder that died.
  bool IsComplete(uint64_t generation) const;
  // steady_clock nanoseconds of the latest completion.
  int64_t completed_at_ns() const;

  // Blocks until `generation` completed. An interprocess event may depend on
  // another process: when that process dies before completing its record,
  // the record is abandoned and the wait ends (true) within about
  // kHostIpcEventWaitSlice of the process being reaped; when it lives but
  // never completes it, the wait gives up (false) once `*cancel` becomes
  // true, checked every kHostIpcEventWaitSlice. A plain event's record is
  // always already queued on a live stream, so its wait ends by itself.
  bool Wait(uint64_t generation, const std::atomic<bool>* cancel) const;

  // Calls `waiter` once Complete on this object completes `generation`, on
  // the completing thread and outside every lock of this event. Returns 0,
  // dropping `waiter` uncalled, when `generation` is complete already (as
  // IsComplete judges); otherwise a token for RemoveWaiter. `waiter` must not
  // call back into this event.
  uint64_t AddWaiter(uint64_t generation, Waiter waiter);
  // Drops the waiter `token` names unless it was called already; afterwards
  // it is never called. The caller uses this when the record was found
  // complete some other way (polling an interprocess event, giving up).
  void RemoveWaiter(uint64_t token);

 private:
  struct PendingWaiter {
    uint64_t token = 0;
    uint64_t generation = 0;
    Waiter waiter;
  };

  // Removes the waiters on generations up to `generation`, for the caller to
  // call once it released mu_.
  std::vector<Waiter> TakeWaitersLocked(uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs that this call found an interprocess record abandoned.
  void LogAbandoned(const HostIpcAbandonedRecord& abandoned) const;

  const DeviceIndex device_;
  const EventFlags flags_;
  const std::shared_ptr<HostIpcEvent> ipc_;
  const std::string ipc_handle_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar completed_cv_;
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completed_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // Few per event (the streams parked on it); Complete scans them all anyway.
  std::vector<PendingWaiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_token_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace gpumux
