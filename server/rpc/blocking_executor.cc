#include "server/rpc/blocking_executor.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumux {

BlockingExecutor::~BlockingExecutor() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads = std::move(threads_);
    for (std::thread& thread : exited_) threads.push_back(std::move(thread));
    exited_.clear();
  }
  for (std::thread& thread : threads) thread.join();
}

void BlockingExecutor::JoinExitedLocked() {
  // They have left Work() (after handing themselves over here under mu_),
  // so each join returns at once.
  for (std::thread& thread : exited_) thread.join();
  exited_.clear();
}

absl::Status BlockingExecutor::Run(uint64_t key, Task task) {
  absl::MutexLock lock(&mu_);
  Key& state = keys_[key];
  if (state.admitted >= max_running_per_key_) {
    const size_t most = key == kNoSession ? max_waiting_per_key_ / 4 : max_waiting_per_key_;
    if (state.waiting.size() >= most) {
      return absl::ResourceExhaustedError(absl::StrCat(
          key == kNoSession ? "calls without a session" : "this session's blocking calls", ": ",
          max_running_per_key_, " run and ", most,
          " wait already, the most allowed; retry once some have ended"));
    }
    state.waiting.push_back(std::move(task));  // admitted when one of its tasks ends
    return absl::OkStatus();
  }
  ++state.admitted;
  queue_.emplace_back(key, std::move(task));
  // Every idle worker takes one queued task; start a worker only for a task
  // no idle one will take, and none past the bound (a busy worker takes it
  // when it is done).
  if (idle_ >= queue_.size() || threads_.size() >= max_threads_) return absl::OkStatus();
  JoinExitedLocked();
  try {
    threads_.emplace_back([this] { Work(); });
  } catch (const std::system_error& error) {
    // The one exception gpumux catches: std::thread reports EAGAIN only so.
    if (!threads_.empty()) return absl::OkStatus();  // a worker takes it later
    queue_.pop_back();
    if (--state.admitted == 0) keys_.erase(key);
    return absl::ResourceExhaustedError(
        absl::StrCat("no thread for a blocking call: the system refused one (", error.what(),
                     "); the node is out of threads or processes (a pids limit)"));
  }
  return absl::OkStatus();
}

void BlockingExecutor::Work() {
  absl::MutexLock lock(&mu_);
  while (true) {
    ++idle_;
    const bool woken =
        mu_.AwaitWithTimeout(absl::Condition(
                                 +[](BlockingExecutor* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                   return !self->queue_.empty() || self->stopping_;
                                 },
                                 this),
                             idle_timeout_);
    --idle_;
    if (!woken) {
      // Idle too long: the pool shrinks back after a burst. This thread's
      // std::thread goes to exited_, joined by the next Run or the destructor.
      const auto self = std::find_if(threads_.begin(), threads_.end(), [](const std::thread& t) {
        return t.get_id() == std::this_thread::get_id();
      });
      exited_.push_back(std::move(*self));
      threads_.erase(self);
      return;
    }
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
