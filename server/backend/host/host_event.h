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

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/host_ipc_event.h"
#include "common/ids.h"
#include "server/backend/device_backend.h"

namespace gpumux {

class HostEvent {
 public:
  // A plain event (flags.interprocess is ignored).
  HostEvent(DeviceIndex device, EventFlags flags);
  // An interprocess event over `ipc` (created here or opened from a handle).
  HostEvent(DeviceIndex device, EventFlags flags, std::unique_ptr<HostIpcEvent> ipc);

  DeviceIndex device() const { return device_; }
  const EventFlags& flags() const { return flags_; }
  // Null for a plain event.
  const HostIpcEvent* ipc() const { return ipc_.get(); }

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

 private:
  // Logs that this call found an interprocess record abandoned.
  void LogAbandoned(const HostIpcAbandonedRecord& abandoned) const;

  const DeviceIndex device_;
  const EventFlags flags_;
  const std::unique_ptr<HostIpcEvent> ipc_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar completed_cv_;
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completed_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpumux
