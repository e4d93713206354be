#include "allocator/block_events.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "spdlog/spdlog.h"

namespace gpumux {

BlockEvents::BlockEvents(DeviceIndex device, SegmentSource* backend)
    : device_(device), backend_(backend) {}

BlockEvents::~BlockEvents() {
  // No waiting: the blocks' segments go back to the backend anyway, and work
  // still queued on them completes safely there.
  for (auto& [stream, queue] : by_stream_) {
    for (const Pending& p : queue) Destroy(p.event);
  }
  for (const auto& [event, shared] : shared_) Destroy(event);
  for (BackendEvent event : pool_) Destroy(event);
}

absl::StatusOr<BackendEvent> BlockEvents::TakePooled() {
  if (!pool_.empty()) {
    BackendEvent event = pool_.back();
    pool_.pop_back();
    return event;
  }
  return backend_->CreateEvent(device_, EventFlags{});
}

void BlockEvents::AddStreamUse(BackendStream stream) { ++stream_uses_[stream].live; }

void BlockEvents::RetireStream(BackendStream stream) {
  auto it = stream_uses_.find(stream);
  if (it == stream_uses_.end() || it->second.retired_last != BackendEvent()) return;
  absl::StatusOr<BackendEvent> event = TakePooled();
  if (!event.ok()) {
    LogError("creating a retiring stream's last event", BackendEvent(), event.status());
    return;
  }
  absl::Status recorded = backend_->RecordEvent(*event, stream);
  if (!recorded.ok()) {
    LogError("recording a retiring stream's last event", *event, recorded);
    pool_.push_back(*event);
    return;
  }
  it->second.retired_last = *event;
  shared_[*event].holds = 1;  // until no live block names the stream
}

void BlockEvents::DropStreamUse(BackendStream stream) {
  auto it = stream_uses_.find(stream);
  if (it == stream_uses_.end() || --it->second.live > 0) return;
  const BackendEvent last = it->second.retired_last;
  stream_uses_.erase(it);
  if (last != BackendEvent()) Unhold(last);
}

void BlockEvents::BeginCallerEvents(absl::Span<const BackendEvent> events) {
  for (BackendEvent event : events) {
    Shared& shared = shared_[event];
    shared.caller = true;
    ++shared.holds;
  }
}

void BlockEvents::EndCallerEvents(absl::Span<const BackendEvent> events) {
  for (BackendEvent event : events) Unhold(event);
}

void BlockEvents::Unhold(BackendEvent event) {
  auto it = shared_.find(event);
  if (it == shared_.end()) return;
  if (--it->second.holds == 0 && it->second.blocks.empty()) {
    Destroy(event);
    shared_.erase(it);
  }
}

void BlockEvents::Insert(Block* block, absl::Span<const BackendEvent> wait_for) {
  for (const StreamUse& use : block->stream_uses) {
    auto retired = stream_uses_.find(use.backend_stream);
    if (retired != stream_uses_.end() && retired->second.retired_last != BackendEvent()) {
      // Its last event already follows all of its work.
      Wait(block, retired->second.retired_last);
      DropStreamUse(use.backend_stream);
      continue;
    }
    DropStreamUse(use.backend_stream);
    absl::StatusOr<BackendEvent> event = TakePooled();
    if (!event.ok()) {
      LogError("creating an event for a freed block", BackendEvent(), event.status());
      continue;
    }
    absl::Status recorded = backend_->RecordEvent(*event, use.backend_stream);
    if (!recorded.ok()) {
      // A failed record leaves the event as it was: still fit for the pool.
      LogError("recording a freed block's event", *event, recorded);
      pool_.push_back(*event);
      continue;
    }
    ++block->event_count;
    ++outstanding_;
    by_stream_[use.backend_stream].push_back(Pending{*event, block});
  }
  block->stream_uses.clear();
  for (BackendEvent event : wait_for) Wait(block, event);
}

void BlockEvents::Wait(Block* block, BackendEvent event) {
  auto it = shared_.find(event);
  if (it == shared_.end() || it->second.completed) return;
  it->second.blocks.push_back(block);
  ++block->event_count;
  ++outstanding_;
}

void BlockEvents::Poll(OnReady on_ready) {
  for (auto it = by_stream_.begin(); it != by_stream_.end();) {
    std::deque<Pending>& queue = it->second;
    while (!queue.empty()) {
      const Pending& p = queue.front();
      absl::StatusOr<bool> done = backend_->QueryEvent(p.event);
      if (!done.ok()) {
        LogError("querying a freed block's event", p.event, done.status());
      } else if (!*done) {
        break;  // later events of this stream cannot have completed either
      }
      Complete(p, done.ok(), on_ready);
      queue.pop_front();
    }
    // Streams come and go with clients: drop drained queues.
    if (queue.empty()) {
      by_stream_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto& [event, shared] : shared_) {
    if (shared.blocks.empty()) continue;
    absl::StatusOr<bool> done = backend_->QueryEvent(event);
    if (!done.ok()) LogError("querying a freed block's event", event, done.status());
    if (!done.ok() || *done) CompleteShared(shared, on_ready);
  }
  SweepShared();
}

void BlockEvents::Synchronize(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready) {
  for (auto it = by_stream_.begin(); it != by_stream_.end();) {
    std::deque<Pending>& queue = it->second;
    std::deque<Pending> kept;
    for (const Pending& p : queue) {
      if (wanted(p.block)) {
        SyncAndComplete(p, on_ready);
      } else {
        kept.push_back(p);
      }
    }
    if (kept.empty()) {
      by_stream_.erase(it++);
    } else {
      queue.swap(kept);
      ++it;
    }
  }
  // Retired streams' last events are waited for like pooled ones. Caller
  // events are only queried, after those waits (which gave them time): one
  // whose recorder never completes it must not wedge the device behind the
  // caller's lock.
  for (bool caller : {false, true}) {
    for (auto& [event, shared] : shared_) {
      if (shared.caller != caller ||
          std::none_of(shared.blocks.begin(), shared.blocks.end(), wanted))
        continue;
      absl::Status status = absl::OkStatus();
      if (caller) {
        absl::StatusOr<bool> done = backend_->QueryEvent(event);
        if (done.ok() && !*done) continue;
        status = done.status();
      } else {
        status = backend_->SynchronizeEvent(event);
      }
      if (!status.ok()) LogError("waiting for a freed block's event", event, status);
      // Complete for every block waiting on it, wanted or not.
      CompleteShared(shared, on_ready);
    }
  }
  SweepShared();
}

size_t BlockEvents::AbandonForeign(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready) {
  size_t abandoned = 0;
  std::vector<Block*> ready;
  for (auto& [event, shared] : shared_) {
    if (!shared.caller) continue;
    // Not even queried: whatever it says, the work it stood for is gone.
    auto kept = std::partition(shared.blocks.begin(), shared.blocks.end(),
                               [&](const Block* b) { return !wanted(b); });
    ready.insert(ready.end(), kept, shared.blocks.end());
    shared.blocks.erase(kept, shared.blocks.end());
  }
  for (Block* block : ready) {
    --outstanding_;
    ++abandoned;
    ReadyOne(block, on_ready);
  }
  SweepShared();
  return abandoned;
}

void BlockEvents::CompleteShared(Shared& shared, OnReady on_ready) {
  shared.completed = true;
  std::vector<Block*> blocks = std::move(shared.blocks);
  shared.blocks.clear();
  for (Block* block : blocks) {
    --outstanding_;
    ReadyOne(block, on_ready);
  }
}

void BlockEvents::SweepShared() {
  for (auto it = shared_.begin(); it != shared_.end();) {
    if (it->second.holds > 0 || !it->second.blocks.empty()) {
      ++it;
      continue;
    }
    Destroy(it->first);
    shared_.erase(it++);
  }
}

void BlockEvents::SyncAndComplete(const Pending& p, OnReady on_ready) {
  absl::Status synced = backend_->SynchronizeEvent(p.event);
  if (!synced.ok()) LogError("waiting for a freed block's event", p.event, synced);
  Complete(p, synced.ok(), on_ready);
}

void BlockEvents::Complete(const Pending& p, bool healthy, OnReady on_ready) {
  --outstanding_;
  if (healthy) {
    pool_.push_back(p.event);
  } else {
    Destroy(p.event);
  }
  ReadyOne(p.block, on_ready);
}

void BlockEvents::ReadyOne(Block* block, OnReady on_ready) {
  if (--block->event_count == 0) on_ready(block);
}

void BlockEvents::Destroy(BackendEvent event) {
  absl::Status status = backend_->DestroyEvent(event);
  if (!status.ok()) LogError("destroying an event", event, status);
}

void BlockEvents::LogError(const char* what, BackendEvent event, const absl::Status& status) {
  // Each failure is logged here once and never returned. The first of a
  // device is an error; once a device is broken every event call fails, and
  // the calls that reach the client report that already.
  const std::string which =
      event == BackendEvent() ? std::string() : absl::StrCat(" (event ", event.value(), ")");
  if (errors_++ == 0) {
    spdlog::error(
        "allocator: GPU {}: {}{}: {} (treated as completed; later event errors "
        "on this GPU are logged at debug level)",
        device_.value(), what, which, status.ToString());
  } else {
    spdlog::debug("allocator: GPU {}: {}{}: {} (treated as completed)", device_.value(), what,
                  which, status.ToString());
  }
}

}  // namespace gpumux
