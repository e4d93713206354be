#include "server/rpc/blocking_executor.h"

#include <utility>

namespace gpumux {

BlockingExecutor::~BlockingExecutor() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads = std::move(threads_);
  }
  for (std::thread& thread : threads) thread.join();
}

void BlockingExecutor::Run(uint64_t key, Task task) {
  absl::MutexLock lock(&mu_);
  Key& state = keys_[key];
  if (state.admitted >= max_running_per_key_) {
    state.waiting.push_back(std::move(task));  // admitted when one of its tasks ends
    return;
  }
  ++state.admitted;
  queue_.emplace_back(key, std::move(task));
  // Every idle worker takes one queued task; start a worker only for a task
  // no idle one will take.
  if (idle_ >= queue_.size()) return;
  threads_.emplace_back([this] { Work(); });
}

void BlockingExecutor::Work() {
  absl::MutexLock lock(&mu_);
  while (true) {
    ++idle_;
    mu_.Await(absl::Condition(
        +[](BlockingExecutor* self) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !self->queue_.empty() || self->stopping_; },
        this));
    --idle_;
    // Stopping with nothing queued: tasks still waiting for their key are
    // queued by the worker that ends their key's running task, before it
    // comes back here.
    if (queue_.empty()) return;
    auto [key, task] = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    std::move(task)();
    mu_.Lock();
    auto it = keys_.find(key);
    if (!it->second.waiting.empty()) {
      // The key's next task takes the place this one held; this worker
      // (now back among the idle) or another picks it up.
      queue_.emplace_back(key, std::move(it->second.waiting.front()));
      it->second.waiting.pop_front();
    } else if (--it->second.admitted == 0) {
      keys_.erase(it);
    }
  }
}

size_t BlockingExecutor::threads_for_test() const {
  absl::MutexLock lock(&mu_);
  return threads_.size();
}

}  // namespace gpumux
