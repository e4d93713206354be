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

HostEvent::HostEvent(DeviceIndex device, EventFlags flags, std::unique_ptr<HostIpcEvent> ipc)
    : device_(device), flags_(flags), ipc_(std::move(ipc)) {}

uint64_t HostEvent::Record() {
  if (ipc_ != nullptr) return ipc_->Record();
  absl::MutexLock lock(&mu_);
  return ++recorded_;
}

void HostEvent::Complete(uint64_t generation) {
  const int64_t now = SteadyNowNs();
  if (ipc_ != nullptr) {
    ipc_->Complete(generation, now);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (generation <= completed_) return;
  completed_ = generation;
  completed_at_ns_ = now;
  completed_cv_.SignalAll();
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
  spdlog::warn("host backend: interprocess event {}: record {} counted as complete: the process "
               "that made it (pid {}) exited before completing it",
               ipc_->name(), abandoned.generation, abandoned.recorder);
}

}  // namespace gpumux
