#include "server/backend/host/host_stream_pool.h"

#include <pthread.h>

#include <cassert>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumux {

HostStreamPool::HostStreamPool(int workers, const std::atomic<bool>* give_up)
    : watcher_(give_up, "gpumux-hs-ipc") {
  assert(workers >= 1);
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this] { RunWorker(); });
    // Thread names show in top/gdb; Linux keeps 15 characters.
    const std::string label = absl::StrCat("gpumux-hs-", i);
    pthread_setname_np(workers_.back().native_handle(), label.c_str());
  }
}

HostStreamPool::~HostStreamPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ready_cv_.SignalAll();
  }
  for (std::thread& worker : workers_) worker.join();
  absl::MutexLock lock(&mu_);
  assert(ready_count_ == 0);  // workers drain the ready queue before they exit
}

void HostStreamPool::Schedule(std::shared_ptr<HostStream> stream) {
  absl::MutexLock lock(&mu_);
  const int priority = stream->priority();
  ready_[priority].push_back(std::move(stream));
  ++ready_count_;
  ready_cv_.Signal();
}

std::shared_ptr<HostStream> HostStreamPool::Take() {
  absl::MutexLock lock(&mu_);
  while (ready_count_ == 0 && !stopping_) ready_cv_.Wait(&mu_);
  if (ready_count_ == 0) return nullptr;
  for (auto& [priority, line] : ready_) {
    if (line.empty()) continue;
    std::shared_ptr<HostStream> stream = std::move(line.front());
    line.pop_front();
    --ready_count_;
    return stream;
  }
  assert(false && "ready_count_ disagrees with ready_");
  return nullptr;
}

void HostStreamPool::RunWorker() {
  while (std::shared_ptr<HostStream> stream = Take()) stream->RunNext();
}

}  // namespace gpumux
