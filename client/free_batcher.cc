#include "client/free_batcher.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace gpumux {

FreeBatcher::FreeBatcher(SendFn send, absl::Duration delay)
    : send_(std::move(send)), delay_(delay), thread_([this] { Run(); }) {}

FreeBatcher::~FreeBatcher() { Stop().IgnoreError(); }

void FreeBatcher::Enqueue(AllocationId id) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(id);
}

std::vector<AllocationId> FreeBatcher::Take() {
  absl::MutexLock send_lock(&send_mu_);
  absl::MutexLock lock(&mu_);
  std::vector<AllocationId> ids;
  ids.swap(queue_);
  return ids;
}

absl::Status FreeBatcher::Flush() {
  absl::MutexLock send_lock(&send_mu_);
  std::vector<AllocationId> ids;
  {
    absl::MutexLock lock(&mu_);
    ids.swap(queue_);
  }
  if (ids.empty()) return absl::OkStatus();
  return send_(ids);
}

absl::Status FreeBatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  return Flush();
}

size_t FreeBatcher::pending() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void FreeBatcher::Run() {
  while (true) {
    mu_.LockWhen(absl::Condition(this, &FreeBatcher::HasWorkOrStopping));
    // Give frees arriving right after the first one `delay_` to join its batch
    // (a burst of `del`s becomes one RPC) unless an Allocate takes them first.
    if (!stopping_) mu_.AwaitWithTimeout(absl::Condition(&stopping_), delay_);
    const bool stopping = stopping_;
    mu_.Unlock();
    if (stopping) return;  // Stop() flushes.
    if (absl::Status status = Flush(); !status.ok()) {
      // Nobody waits for a background free, so this is where its error leaves.
      spdlog::warn("gpumux: freeing queued allocations failed: {}", status.ToString());
    }
  }
}

}  // namespace gpumux
