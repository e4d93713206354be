#include "client/free_batcher.h"

#include <utility>

#include "common/base/request_limits.h"
#include "spdlog/spdlog.h"

namespace gpumux {

FreeBatcher::FreeBatcher(SendFn send, absl::Duration delay)
    : send_(std::move(send)), delay_(delay), thread_([this] { Run(); }) {}

FreeBatcher::~FreeBatcher() { Stop().IgnoreError(); }

bool FreeBatcher::Enqueue(AllocationId id, absl::string_view wait_event_handle,
                          DeviceIndex fence_device) {
  absl::MutexLock lock(&mu_);
  if (queue_.ids.size() >= kMaxFreeIdsPerRequest) return false;
  if (wait_event_handle.empty()) {
    queue_.ids.push_back(id);
    return true;
  }
  if (!queue_.wait_event_handles.empty() && fence_device != fence_device_) return false;
  // A thread's fences are one event per CUDA stream: few distinct handles.
  bool known = false;
  for (const std::string& handle : queue_.wait_event_handles)
    known = known || handle == wait_event_handle;
  if (!known && queue_.wait_event_handles.size() >= kMaxWaitEventHandlesPerRequest) return false;
  queue_.ids.push_back(id);
  fence_device_ = fence_device;
  if (!known) queue_.wait_event_handles.emplace_back(wait_event_handle);
  return true;
}

FreeBatch FreeBatcher::Take() {
  absl::MutexLock send_lock(&send_mu_);
  absl::MutexLock lock(&mu_);
  FreeBatch batch;
  std::swap(batch, queue_);
  return batch;
}

absl::Status FreeBatcher::Flush() {
  absl::MutexLock send_lock(&send_mu_);
  FreeBatch batch;
  {
    absl::MutexLock lock(&mu_);
    std::swap(batch, queue_);
  }
  if (batch.ids.empty()) return absl::OkStatus();
  return send_(batch);
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
  return queue_.ids.size();
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
    if (absl::Status status = Flush(); !status.ok() && !absl::IsUnavailable(status)) {
      // Nobody waits for a background free, so this is where its error
      // leaves; UNAVAILABLE (the daemon or the session is gone) released the
      // memory anyway, and the caller's next call says so.
      spdlog::warn("gpumux: freeing queued allocations failed: {}", status.ToString());
    }
  }
}

}  // namespace gpumux
