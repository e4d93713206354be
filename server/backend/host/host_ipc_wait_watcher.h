#pragma once

// HostIpcWaitWatcher: one thread that polls the interprocess records parked
// streams wait on. Another process completes such a record in shared memory
// without telling this one, and a recorder that dies never completes it
// (HostIpcEvent's abandoned records), so someone has to look; one thread
// looks for all of them, and the streams give their pool threads back.
//
// Each watched record is checked first kFirstCheck after Watch, then at
// doubling intervals capped at kHostIpcEventWaitSlice: waits that end soon
// (a client's copy) are noticed soon, and a long wait costs one check per
// slice, as a thread in HostEvent::Wait would. Once `*give_up` is true (the
// backend shutting down), a record still pending at its check is given up,
// with a warning naming the event. Thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/host/host_event.h"

namespace gpumux {

class HostIpcWaitWatcher {
 public:
  using Done = absl::AnyInvocable<void() &&>;
  using Clock = std::chrono::steady_clock;

  static constexpr std::chrono::milliseconds kFirstCheck{1};

  // Starts the thread, named `label` (at most 15 characters show).
  // `give_up` must outlive the watcher.
  HostIpcWaitWatcher(const std::atomic<bool>* give_up, const char* label);
  // Stops the thread and drops, uncalled, whatever is still watched.
  ~HostIpcWaitWatcher();
  HostIpcWaitWatcher(const HostIpcWaitWatcher&) = delete;
  HostIpcWaitWatcher& operator=(const HostIpcWaitWatcher&) = delete;

  // Calls `done` once, on the watcher's thread and outside its lock, when
  // `generation` of interprocess `event` completed, was abandoned by a
  // recorder that died (HostEvent::IsComplete logs that), or was given up.
  void Watch(std::shared_ptr<const HostEvent> event, uint64_t generation, Done done);

 private:
  struct Watched {
    std::shared_ptr<const HostEvent> event;
    uint64_t generation = 0;
    Done done;
    Clock::duration interval{kFirstCheck};
  };

  void Run();
  // Blocks until some watched records are due and moves them to `due`;
  // false once the watcher stops.
  bool TakeDue(std::vector<Watched>* due);

  const std::atomic<bool>* const give_up_;
  absl::Mutex mu_;
  absl::CondVar changed_cv_;  // a record was added, or stopping_
  // By the time each is due for its next check.
  std::multimap<Clock::time_point, Watched> watched_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace gpumux
