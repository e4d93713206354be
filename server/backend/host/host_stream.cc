#include "server/backend/host/host_stream.h"

#include <cassert>
#include <utility>

#include "server/backend/host/host_stream_pool.h"

namespace gpumux {

std::shared_ptr<HostStream> HostStream::Create(HostStreamPool& pool, DeviceIndex device,
                                               int priority) {
  // Not make_shared: the constructor is private.
  return std::shared_ptr<HostStream>(new HostStream(pool, device, priority));
}

absl::Status HostStream::Push(absl::FunctionRef<void(std::deque<Item>&)> append) {
  bool schedule = false;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::FailedPreconditionError("stream is being destroyed");
    const size_t before = queue_.size();
    append(queue_);
    enqueued_ += queue_.size() - before;
    // Any other state means the stream is with the pool already, and goes
    // on to this item by itself.
    if (state_ == State::kIdle) {
      state_ = State::kQueued;
      schedule = true;
    }
  }
  if (schedule) pool_.Schedule(shared_from_this());
  return absl::OkStatus();
}

absl::Status HostStream::EnqueueFrom(absl::FunctionRef<Work()> make) {
  return Push([&make](std::deque<Item>& queue) { queue.push_back(Item{make(), nullptr, 0}); });
}

absl::Status HostStream::Enqueue(Work work) {
  return EnqueueFrom([&work]() -> Work { return std::move(work); });
}

absl::Status HostStream::EnqueueWait(std::shared_ptr<HostEvent> event, uint64_t generation) {
  return Push([&](std::deque<Item>& queue) {
    queue.push_back(Item{nullptr, std::move(event), generation});
  });
}

absl::Status HostStream::EnqueueHold(Work reached, std::shared_ptr<HostEvent> event,
                                     uint64_t generation) {
  bool reached_now = false;
  absl::Status pushed = Push([&](std::deque<Item>& queue) {
    // Nothing before it: reached already (run below, outside the lock).
    reached_now = state_ == State::kIdle && queue.empty();
    if (!reached_now) queue.push_back(Item{std::move(reached), nullptr, 0, /*reached=*/true});
    queue.push_back(Item{nullptr, std::move(event), generation});
  });
  if (pushed.ok() && reached_now) std::move(reached)();
  return pushed;
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
}

bool HostStream::Finished() {
  absl::MutexLock lock(&mu_);
  return stopping_ && completed_ == enqueued_;
}

void HostStream::RunNext() {
  Item item;
  std::shared_ptr<HostEvent> wait_event;
  uint64_t wait_generation = 0;
  {
    absl::MutexLock lock(&mu_);
    assert(state_ == State::kQueued && !queue_.empty());
    state_ = State::kRunning;
    Item& front = queue_.front();
    if (front.work == nullptr && !wait_over_) {
      wait_event = front.event;
      wait_generation = front.generation;
    } else {
      item = std::move(front);
      queue_.pop_front();
      wait_over_ = false;
    }
  }
  if (wait_event != nullptr) {
    // Checked outside the lock: judging an interprocess record makes a
    // system call. While kRunning nobody else takes the front item.
    if (!wait_event->IsComplete(wait_generation)) {
      Park(std::move(wait_event), wait_generation);
      return;
    }
    wait_event = nullptr;
    absl::MutexLock lock(&mu_);
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  if (item.work != nullptr) std::move(item.work)();
  // Release the item's captures (keep_alive, mappings, a waited event)
  // before anyone can observe the completion.
  item = Item();
  bool more = false;
  {
    absl::MutexLock lock(&mu_);
    ++completed_;
    done_cv_.SignalAll();
    more = !queue_.empty();
    state_ = more ? State::kQueued : State::kIdle;
  }
  // Back to the end of its priority's line: streams sharing the workers
  // take turns item by item.
  if (more) pool_.Schedule(shared_from_this());
}

void HostStream::Park(std::shared_ptr<HostEvent> event, uint64_t generation) {
  uint64_t park = 0;
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kParked;
    park = ++parks_;
  }
  // Whoever ends the park holds the stream until then; the references go
  // when the waiter is called or removed, so a parked stream that the
  // backend already forgot (destroyed, draining) still resumes.
  std::shared_ptr<HostStream> self = shared_from_this();
  const uint64_t token = event->AddWaiter(generation, [self, park] { self->Resume(park); });
  if (token == 0) {  // completed since the check in RunNext
    Resume(park);
    return;
  }
  if (event->ipc() != nullptr) {
    // Another process completing the record (or dying) calls no waiter here.
    pool_.WatchInterprocess(event, generation, [self = std::move(self), park, event, token] {
      event->RemoveWaiter(token);
      self->Resume(park);
    });
  }
}

void HostStream::Resume(uint64_t park) {
  Work reached;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kParked || parks_ != park) return;
    if (queue_.size() < 2 || !queue_[1].reached) {
      wait_over_ = true;
      state_ = State::kQueued;
    } else {
      // The wait is over and a hold comes right behind it (holds are queued
      // as a `reached` and a wait, so one at most): it is reached now, on
      // this thread (EnqueueHold).
      state_ = State::kRunning;
      queue_.pop_front();
      ++completed_;
      reached = std::move(queue_.front().work);
      queue_.pop_front();
    }
  }
  if (reached != nullptr) {
    std::move(reached)();
    reached = nullptr;  // its captures go before the completion shows
    absl::MutexLock lock(&mu_);
    ++completed_;
    done_cv_.SignalAll();
    if (queue_.empty()) {
      state_ = State::kIdle;
      return;
    }
    state_ = State::kQueued;
  }
  pool_.Schedule(shared_from_this());
}

}  // namespace gpumux
