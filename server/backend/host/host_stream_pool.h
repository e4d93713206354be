#pragma once

// HostStreamPool: the host backend's fixed set of worker threads that run
// every stream's work (HostStream), so streams cost memory, not threads.
// A stream with work ready sits in the pool's ready queue; a worker takes
// the stream of highest priority (lowest number; FIFO among equals), runs
// its front item and puts it back at the end of its line if more is queued.
// A stream is in the ready queue at most once, so its items run one at a
// time and in order; different streams run concurrently up to the pool size.
//
// Streams waiting on an incomplete record are parked outside the pool (see
// HostStream): in-process completions resume them through HostEvent
// waiters, and a watcher thread (HostIpcWaitWatcher) polls interprocess
// records, which other processes complete without telling this one. So
// threads number `workers` + 1, however many streams exist or wait.
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/host/host_event.h"
#include "server/backend/host/host_ipc_wait_watcher.h"
#include "server/backend/host/host_stream.h"

namespace gpumux {

class HostStreamPool {
 public:
  // Starts `workers` threads (precondition: >= 1; HostBackend::Create checks
  // its option) and the watcher. Once `*give_up` is true, parked waits on
  // interprocess records still pending are given up (HostIpcWaitWatcher);
  // `give_up` must outlive the pool.
  HostStreamPool(int workers, const std::atomic<bool>* give_up);
  // Joins the threads. Precondition: every stream's queued work finished
  // (no stream ready or parked), as HostBackend's destructor ensures by
  // synchronizing every stream first.
  ~HostStreamPool();
  HostStreamPool(const HostStreamPool&) = delete;
  HostStreamPool& operator=(const HostStreamPool&) = delete;

  int workers() const { return static_cast<int>(workers_.size()); }

 private:
  friend class HostStream;

  // For HostStream: `stream` has work to run (it just became kQueued).
  void Schedule(std::shared_ptr<HostStream> stream);
  // For HostStream: polls a parked wait on an interprocess record.
  void WatchInterprocess(std::shared_ptr<const HostEvent> event, uint64_t generation,
                         HostIpcWaitWatcher::Done done) {
    watcher_.Watch(std::move(event), generation, std::move(done));
  }

  void RunWorker();
  // Blocks until a stream is ready and takes the one to run next; null once
  // stopping with nothing ready.
  std::shared_ptr<HostStream> Take();

  absl::Mutex mu_;
  absl::CondVar ready_cv_;  // a stream became ready, or stopping_
  // Ready streams by priority, lowest number (highest priority) first. A
  // priority's line stays when it empties: the backend allows six.
  std::map<int, std::deque<std::shared_ptr<HostStream>>> ready_ ABSL_GUARDED_BY(mu_);
  uint64_t ready_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Declared after what its callbacks reach (Schedule), so it stops before
  // those go; the destructor joins the workers first.
  HostIpcWaitWatcher watcher_;
  std::vector<std::thread> workers_;
};

}  // namespace gpumux
