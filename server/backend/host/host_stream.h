#pragma once

// HostStream: one stream of the host backend, a FIFO of work items that the
// backend's HostStreamPool runs one at a time, in order, on whichever worker
// takes the stream; the stream owns no thread. Query is false while any
// queued item has not finished; Synchronize waits for the items queued
// before it. Items are destroyed (releasing what they hold, e.g. a copy's
// keep_alive) before their completion becomes visible. Thread-safe.
//
// A wait (EnqueueWait) whose record has not completed parks the stream: it
// leaves its worker and goes back to the pool once the event completes, so
// streams waiting on work queued behind them never hold the pool's threads.
//
// Priority: when several streams have work ready, the pool's workers take
// those of higher priority (lower number) first; an item already running is
// never interrupted. It does not change OS scheduling.

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/common/ids.h"
#include "server/backend/host/host_event.h"

namespace gpumux {

class HostStreamPool;

class HostStream : public std::enable_shared_from_this<HostStream> {
 public:
  using Work = absl::AnyInvocable<void() &&>;

  // A stream whose work `pool` runs; `pool` must outlive every item queued
  // (HostBackend drains its streams before destroying the pool).
  static std::shared_ptr<HostStream> Create(HostStreamPool& pool, DeviceIndex device, int priority);
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
  // Queues a wait: later items run once `generation` of `event` completed
  // (an interprocess one also when abandoned by a recorder that died, or
  // given up at shutdown; see HostStreamPool). FAILED_PRECONDITION once Stop
  // was called.
  absl::Status EnqueueWait(std::shared_ptr<HostEvent> event, uint64_t generation);
  // A hold of the stream for the host (HostBackend::HoldStream): `reached`
  // runs once every item queued before it finished, and then the stream
  // waits on `generation` of `event`; nothing another thread queues runs
  // between the two. `reached` must be quick and must not block or call
  // into this stream: it runs on whichever thread finds the stream there,
  // which can be this caller (an idle stream) or the thread whose Complete
  // ended the wait before it (a hold right behind another: its owner hears
  // at once, with no worker woken in between).
  absl::Status EnqueueHold(Work reached, std::shared_ptr<HostEvent> event, uint64_t generation);

  // True when every item queued so far has finished.
  bool Query();
  // Blocks until every item queued before the call has finished.
  void Synchronize();
  // Refuses further items; those queued still run.
  void Stop();
  // True once Stop was called and every item has finished.
  bool Finished();

 private:
  friend class HostStreamPool;

  // A work item, or a wait (null `work`) on `generation` of `event`.
  struct Item {
    Work work;
    std::shared_ptr<HostEvent> event;
    uint64_t generation = 0;
    bool reached = false;  // `work` is a hold's `reached` (EnqueueHold)
  };

  // Where the stream is between the pool and its queue. It is in the pool's
  // ready queue exactly while kQueued, so no two workers ever run it.
  enum class State {
    kIdle,     // nothing queued
    kQueued,   // in the pool's ready queue
    kRunning,  // a worker runs (or is about to run) the front item
    kParked,   // the front item is a wait on a record not complete yet
  };

  HostStream(HostStreamPool& pool, DeviceIndex device, int priority)
      : pool_(pool), device_(device), priority_(priority) {}

  // Runs `append` under the stream's lock; it appends the new items to the
  // queue it is given.
  absl::Status Push(absl::FunctionRef<void(std::deque<Item>&)> append);
  // Called by a pool worker for a kQueued stream it took from the ready
  // queue: runs the front item, or parks the stream on its wait.
  void RunNext();
  // Leaves the worker until `generation` of `event` completes.
  void Park(std::shared_ptr<HostEvent> event, uint64_t generation);
  // Ends park number `park`: the front wait is over, the holds' `reached`
  // right behind it run on this thread, and the stream goes back to the
  // pool. Ignored unless the stream is still in that park (the event's
  // waiter and the interprocess watcher may both report it).
  void Resume(uint64_t park);

  HostStreamPool& pool_;
  const DeviceIndex device_;
  const int priority_;
  absl::Mutex mu_;
  absl::CondVar done_cv_;  // completed_ grew
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  // Numbers the parks, so a late report of an earlier one changes nothing.
  uint64_t parks_ ABSL_GUARDED_BY(mu_) = 0;
  // The front item is a wait that Resume ended (given up waits included, so
  // it is not checked again).
  bool wait_over_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpumux
