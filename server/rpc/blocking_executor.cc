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

void BlockingExecutor::Run(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  // Every idle worker takes one queued task; start a worker only for a task
  // no idle one will take.
  if (idle_ >= queue_.size() || threads_.size() >= max_threads_) return;
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
    if (queue_.empty()) return;  // stopping, and nothing left to run
    absl::AnyInvocable<void() &&> task = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    std::move(task)();
    mu_.Lock();
  }
}

size_t BlockingExecutor::threads_for_test() const {
  absl::MutexLock lock(&mu_);
  return threads_.size();
}

}  // namespace gpumux
