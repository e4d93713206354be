#pragma once

// BlockingExecutor: threads for the handlers that may block (synchronize,
// copies asked to wait), so they never hold gRPC's callback threads, which
// every other call and every session stream's end needs. Tasks carry a key
// (the session): at most `max_running_per_key` tasks of one key run at once
// and its further tasks wait for them, so one session's blocked calls (say,
// synchronizes on an event its peer never completes) cannot hold every
// thread and stall other sessions. A task that may start runs on an idle
// worker, or on a new one. Workers stay for later tasks (the pool grows to
// the peak number of concurrently running tasks) until idle for
// `idle_timeout`, and number at most `max_threads` in all
// (gpumuxd --blocking-threads): past it tasks queue for a free worker, so
// the daemon's threads are bounded, not counted per session. The tasks of a
// key waiting for one of its own to end are bounded too
// (`max_waiting_per_key`; a quarter of it for the tasks of no session, which
// anyone reaching the observe port may send): past it a task is refused, so
// no caller can grow the daemon's memory with calls that wait. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpumux {

class BlockingExecutor {
 public:
  static constexpr size_t kDefaultMaxThreads = 512;
  static constexpr size_t kDefaultMaxWaitingPerKey = 1024;
  explicit BlockingExecutor(size_t max_running_per_key = 64,
                            size_t max_threads = kDefaultMaxThreads,
                            absl::Duration idle_timeout = absl::Seconds(2),
                            size_t max_waiting_per_key = kDefaultMaxWaitingPerKey)
      : max_running_per_key_(max_running_per_key),
        max_threads_(max_threads),
        idle_timeout_(idle_timeout),
        max_waiting_per_key_(max_waiting_per_key) {}
  // Runs every task, queued or waiting for its key, then joins the workers.
  ~BlockingExecutor();
  BlockingExecutor(const BlockingExecutor&) = delete;
  BlockingExecutor& operator=(const BlockingExecutor&) = delete;

  // Key: the session the task serves (its id). RESOURCE_EXHAUSTED, with the
  // task dropped unrun, when its key has as many tasks waiting as allowed,
  // or when it needs a worker, none exists and the system refuses a new
  // thread (a pids or thread limit).
  absl::Status Run(uint64_t key, absl::AnyInvocable<void() &&> task);
  // A task of no session (Device.Synchronize): all such tasks share one key.
  absl::Status Run(absl::AnyInvocable<void() &&> task) { return Run(kNoSession, std::move(task)); }

  size_t threads_for_test() const;

 private:
  using Task = absl::AnyInvocable<void() &&>;
  // Session ids count up from 1, so none is this.
  static constexpr uint64_t kNoSession = ~uint64_t{0};
  struct Key {
    size_t admitted = 0;       // in queue_ or running
    std::deque<Task> waiting;  // beyond the limit, in arrival order
  };

  void Work();
  void JoinExitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_running_per_key_;
  const size_t max_threads_;
  const absl::Duration idle_timeout_;
  const size_t max_waiting_per_key_;
  mutable absl::Mutex mu_;
  std::deque<std::pair<uint64_t, Task>> queue_ ABSL_GUARDED_BY(mu_);  // admitted, not started
  absl::flat_hash_map<uint64_t, Key> keys_ ABSL_GUARDED_BY(mu_);      // keys with admitted tasks
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> exited_ ABSL_GUARDED_BY(mu_);  // idle workers that left, to join
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpumux
