#pragma once

// HostStream: one stream of the host backend, a FIFO of work items that a
// dedicated worker thread runs in order. Query is false while any queued item
// has not finished; Synchronize waits for the items queued before it. Items
// are destroyed (releasing what they hold, e.g. a copy's keep_alive) before
// their completion becomes visible. Thread-safe.
//
// Priority: every stream has its own thread, so work on a high-priority
// stream never queues behind a low-priority stream's work; the number is
// kept for reporting only and does not change OS scheduling.

#include <cstdint>
#include <deque>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/ids.h"

namespace gpumux {

class HostStream {
 public:
  using Work = absl::AnyInvocable<void() &&>;

  // Starts the worker thread; `label` names it (at most 15 characters show).
  HostStream(DeviceIndex device, int priority, const std::string& label);
  // Stop(), then waits for the worker to run everything queued and exit.
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  DeviceIndex device() const { return device_; }
  int priority() const { return priority_; }

  // Queues the item `make` returns. `make` runs under the stream's lock, so
  // whatever it captures (an event generation) is ordered exactly like the
  // queue; it must not block or call back into this stream.
  // FAILED_PRECONDITION, without calling `make`, once Stop was called.
  absl::Status EnqueueFrom(absl::FunctionRef<Work()> make);
  absl::Status Enqueue(Work work);

  // True when every item queued so far has finished.
  bool Query();
  // Blocks until every item queued before the call has finished.
  void Synchronize();
  // Refuses further items; the worker exits once the queue is empty.
  void Stop();
  // True once the worker has exited (after Stop and the last item).
  bool Finished();

 private:
  void Run();

  const DeviceIndex device_;
  const int priority_;
  absl::Mutex mu_;
  absl::CondVar work_cv_;  // queue_ gained an item, or stopping_
  absl::CondVar done_cv_;  // completed_ grew, or finished_
  std::deque<Work> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;  // last: starts once the fields above exist
};

}  // namespace gpumux
