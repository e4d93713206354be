#pragma once

// BlockingExecutor: threads for the handlers that may block (synchronize,
// copies asked to wait), so they never hold gRPC's callback threads, which
// every other call and every session stream's end needs. A task runs on an
// idle worker, or on a new one while fewer than `max_threads` exist, else it
// queues. Workers stay for later tasks (the pool grows to the peak number of
// concurrent blocking calls). Thread-safe.

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace gpumux {

class BlockingExecutor {
 public:
  explicit BlockingExecutor(size_t max_threads = 256) : max_threads_(max_threads) {}
  // Runs every queued task, then joins the workers.
  ~BlockingExecutor();
  BlockingExecutor(const BlockingExecutor&) = delete;
  BlockingExecutor& operator=(const BlockingExecutor&) = delete;

  void Run(absl::AnyInvocable<void() &&> task);

  size_t threads_for_test() const;

 private:
  void Work();

  const size_t max_threads_;
  mutable absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpumux
