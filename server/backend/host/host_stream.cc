#include "server/backend/host/host_stream.h"

#include <pthread.h>

#include <utility>

namespace gpumux {

HostStream::HostStream(DeviceIndex device, int priority, const std::string& label)
    : device_(device), priority_(priority), worker_([this] { Run(); }) {
  // Thread names show in top/gdb; Linux keeps 15 characters.
  pthread_setname_np(worker_.native_handle(), label.substr(0, 15).c_str());
}

HostStream::~HostStream() {
  Stop();
  worker_.join();
}

absl::Status HostStream::EnqueueFrom(absl::FunctionRef<Work()> make) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("stream is being destroyed");
  queue_.push_back(make());
  ++enqueued_;
  work_cv_.Signal();
  return absl::OkStatus();
}

absl::Status HostStream::Enqueue(Work work) {
  return EnqueueFrom([&work]() -> Work { return std::move(work); });
}

bool HostStream::Query() {
  absl::MutexLock lock(&mu_);
  return completed_ == enqueued_;
}

void HostStream::Synchronize() {
  absl::MutexLock lock(&mu_);
  // Only what was queued before the call: later items cannot starve it.
  const uint64_t target = enqueued_;
  while (completed_ < target) done_cv_.Wait(&mu_);
}

void HostStream::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  work_cv_.Signal();
}

bool HostStream::Finished() {
  absl::MutexLock lock(&mu_);
  return finished_;
}

void HostStream::Run() {
  while (true) {
    Work work;
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) work_cv_.Wait(&mu_);
      if (queue_.empty()) break;  // stopping and drained
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(work)();
    // Release the item's captures (keep_alive, mappings) before anyone can
    // observe the completion.
    work = nullptr;
    absl::MutexLock lock(&mu_);
    ++completed_;
    done_cv_.SignalAll();
  }
  absl::MutexLock lock(&mu_);
  finished_ = true;
  done_cv_.SignalAll();
}

}  // namespace gpumux
