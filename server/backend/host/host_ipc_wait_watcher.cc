#include "server/backend/host/host_ipc_wait_watcher.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace gpumux {

HostIpcWaitWatcher::HostIpcWaitWatcher(const std::atomic<bool>* give_up, const char* label)
    : give_up_(give_up), thread_([this] { Run(); }) {
  pthread_setname_np(thread_.native_handle(), label);
}

HostIpcWaitWatcher::~HostIpcWaitWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_cv_.Signal();
  }
  thread_.join();
}

void HostIpcWaitWatcher::Watch(std::shared_ptr<const HostEvent> event, uint64_t generation,
                               Done done) {
  absl::MutexLock lock(&mu_);
  watched_.emplace(Clock::now() + kFirstCheck,
                   Watched{std::move(event), generation, std::move(done)});
  // The thread may sleep until a later record is due.
  changed_cv_.Signal();
}

bool HostIpcWaitWatcher::TakeDue(std::vector<Watched>* due) {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (watched_.empty()) {
      changed_cv_.Wait(&mu_);
      continue;
    }
    const Clock::time_point now = Clock::now();
    const Clock::time_point next = watched_.begin()->first;
    if (next > now) {
      changed_cv_.WaitWithTimeout(&mu_, absl::FromChrono(next - now));
      continue;
    }
    auto end = watched_.upper_bound(now);
    for (auto it = watched_.begin(); it != end; ++it) due->push_back(std::move(it->second));
    watched_.erase(watched_.begin(), end);
    return true;
  }
  return false;
}

void HostIpcWaitWatcher::Run() {
  std::vector<Watched> due;
  while (TakeDue(&due)) {
    // Checked without the lock: each check may make a system call (kill(2)
    // judging the recorder), and Watch should not wait for them.
    std::vector<Watched> pending;
    for (Watched& watched : due) {
      if (!watched.event->IsComplete(watched.generation)) {
        // relaxed: the flag only asks waits to stop; it guards no data.
        if (!give_up_->load(std::memory_order_relaxed)) {
          watched.interval =
              std::min<Clock::duration>(2 * watched.interval, kHostIpcEventWaitSlice);
          pending.push_back(std::move(watched));
          continue;
        }
        spdlog::warn("host backend: shutting down; gave up waiting for interprocess event {}",
                     watched.event->ipc()->name());
      }
      std::move(watched.done)();
      watched = Watched();  // drop what `done` held before the next check
    }
    due.clear();
    if (pending.empty()) continue;
    absl::MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    for (Watched& watched : pending) {
      const Clock::time_point next = now + watched.interval;
      watched_.emplace(next, std::move(watched));
    }
  }
}

}  // namespace gpumux
