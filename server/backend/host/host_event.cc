#include "server/backend/host/host_event.h"

#include <chrono>
#include <utility>

#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

HostEvent::HostEvent(DeviceIndex device, EventFlags flags) : device_(device), flags_(flags) {}

HostEvent::HostEvent(DeviceIndex device, EventFlags flags, std::shared_ptr<HostIpcEvent> ipc,
                     std::string handle)
    : device_(device), flags_(flags), ipc_(std::move(ipc)), ipc_handle_(std::move(handle)) {}

uint64_t HostEvent::Record() {
  if (ipc_ != nullptr) return ipc_->Record();
  absl::MutexLock lock(&mu_);
  return ++recorded_;
}

void HostEvent::Complete(uint64_t generation) {
  const int64_t now = SteadyNowNs();
  std::vector<Waiter> ready;
  {
    // An interprocess record completes in shared memory before mu_ is taken:
    // AddWaiter checks under mu_, so a waiter added after this point sees the
    // completion and one added before is taken below.
    if (ipc_ != nullptr) ipc_->Complete(generation, now);
    absl::MutexLock lock(&mu_);
    if (ipc_ == nullptr) {
      if (generation <= completed_) return;
      completed_ = generation;
      completed_at_ns_ = now;
      completed_cv_.SignalAll();
    }
    ready = TakeWaitersLocked(generation);
  }
  for (Waiter& waiter : ready) std::move(waiter)();
}

uint64_t HostEvent::AddWaiter(uint64_t generation, Waiter waiter) {
  absl::MutexLock lock(&mu_);
  // IsComplete takes mu_ only for a plain event, so the interprocess check
  // may run here; it is one atomic load, plus kill(2) when the record is
  // still pending.
  const bool complete = ipc_ != nullptr ? IsComplete(generation) : completed_ >= generation;
  if (complete) return 0;
  const uint64_t token = next_waiter_token_++;
  waiters_.push_back(PendingWaiter{token, generation, std::move(waiter)});
  return token;
}

void HostEvent::RemoveWaiter(uint64_t token) {
  Waiter doomed;  // destroyed outside the lock: it may hold the last reference to a stream
  absl::MutexLock lock(&mu_);
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->token == token) {
      doomed = std::move(it->waiter);
      waiters_.erase(it);
      return;
    }
  }
}

std::vector<HostEvent::Waiter> HostEvent::TakeWaitersLocked(uint64_t generation) {
  std::vector<Waiter> ready;
  auto keep = waiters_.begin();
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->generation <= generation) {
      ready.push_back(std::move(it->waiter));
    } else {
      *keep++ = std::move(*it);
    }
  }
  waiters_.erase(keep, waiters_.end());
  return ready;
}

uint64_t HostEvent::recorded() const {
  if (ipc_ != nullptr) return ipc_->recorded();
  absl::MutexLock lock(&mu_);
  return recorded_;
}

bool HostEvent::IsComplete(uint64_t generation) const {
  if (ipc_ != nullptr) {
    HostIpcAbandonedRecord abandoned;
    const HostIpcRecordState state = ipc_->Check(generation, &abandoned);
    if (state == HostIpcRecordState::kAbandoned) LogAbandoned(abandoned);
    return state != HostIpcRecordState::kPending;
  }
  absl::MutexLock lock(&mu_);
  return completed_ >= generation;
}

int64_t HostEvent::completed_at_ns() const {
  if (ipc_ != nullptr) return ipc_->completed_at_ns();
  absl::MutexLock lock(&mu_);
  return completed_at_ns_;
}

bool HostEvent::Wait(uint64_t generation, const std::atomic<bool>* cancel) const {
  if (ipc_ != nullptr) {
    while (true) {
      HostIpcAbandonedRecord abandoned;
      const HostIpcRecordState state = ipc_->Await(generation, kHostIpcEventWaitSlice, &abandoned);
      if (state == HostIpcRecordState::kAbandoned) LogAbandoned(abandoned);
      if (state != HostIpcRecordState::kPending) return true;
      // relaxed: the flag only asks the wait to stop; it guards no data.
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return false;
    }
  }
  absl::MutexLock lock(&mu_);
  while (completed_ < generation) completed_cv_.Wait(&mu_);
  return true;
}

void HostEvent::LogAbandoned(const HostIpcAbandonedRecord& abandoned) const {
  // Logged here, once per record: only the call that completed the record
  // on the dead process's behalf sees kAbandoned.
  spdlog::warn(
      "host backend: interprocess event {}: record {} counted as complete: the process "
      "that made it (pid {}) exited before completing it",
      ipc_->name(), abandoned.generation, abandoned.recorder);
}

}  // namespace gpumux
