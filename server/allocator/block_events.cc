#include "server/allocator/block_events.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gpumux {

BlockEvents::BlockEvents(DeviceIndex device, DeviceBackend* backend)
    : device_(device), backend_(backend) {}

BlockEvents::~BlockEvents() {
  // No waiting: the blocks' segments go back to the backend anyway, and work
  // still queued on them completes safely there.
  for (auto& [stream, queue] : by_stream_) {
    for (const Pending& p : queue) Destroy(p.event);
  }
  for (const Pending& p : foreign_) Destroy(p.event);
  for (BackendEvent event : pool_) Destroy(event);
}

void BlockEvents::Insert(Block* block, absl::Span<const BackendEvent> wait_for) {
  for (const StreamUse& use : block->stream_uses) {
    BackendEvent event;
    if (!pool_.empty()) {
      event = pool_.back();
      pool_.pop_back();
    } else {
      absl::StatusOr<BackendEvent> created = backend_->CreateEvent(device_, EventFlags{});
      if (!created.ok()) {
        LogError("creating an event for a freed block", BackendEvent(), created.status());
        continue;
      }
      event = *created;
    }
    absl::Status recorded = backend_->RecordEvent(event, use.backend_stream);
    if (!recorded.ok()) {
      // A failed record leaves the event as it was: still fit for the pool.
      LogError("recording a freed block's event", event, recorded);
      pool_.push_back(event);
      continue;
    }
    ++block->event_count;
    ++outstanding_;
    by_stream_[use.backend_stream].push_back(Pending{event, block, /*pooled=*/true});
  }
  block->stream_uses.clear();
  for (BackendEvent event : wait_for) {
    ++block->event_count;
    ++outstanding_;
    foreign_.push_back(Pending{event, block, /*pooled=*/false});
  }
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
  QueryForeign([](const Block*) { return true; }, on_ready);
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
  // Caller-supplied events are only queried, after the waits above (which
  // gave them time): one whose recorder never completes it must not wedge
  // the device behind the caller's lock.
  QueryForeign(wanted, on_ready);
}

void BlockEvents::QueryForeign(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready) {
  size_t kept = 0;
  for (size_t i = 0; i < foreign_.size(); ++i) {
    const Pending p = foreign_[i];
    if (!wanted(p.block)) {
      foreign_[kept++] = p;
      continue;
    }
    absl::StatusOr<bool> done = backend_->QueryEvent(p.event);
    if (!done.ok()) {
      LogError("querying a freed block's event", p.event, done.status());
    } else if (!*done) {
      foreign_[kept++] = p;
      continue;
    }
    Complete(p, done.ok(), on_ready);
  }
  foreign_.resize(kept);
}

size_t BlockEvents::AbandonForeign(absl::FunctionRef<bool(const Block*)> wanted,
                                   OnReady on_ready) {
  size_t kept = 0;
  size_t abandoned = 0;
  for (size_t i = 0; i < foreign_.size(); ++i) {
    const Pending p = foreign_[i];
    if (!wanted(p.block)) {
      foreign_[kept++] = p;
      continue;
    }
    // Not even queried: whatever it says, the work it stood for is gone.
    ++abandoned;
    Complete(p, /*healthy=*/true, on_ready);
  }
  foreign_.resize(kept);
  return abandoned;
}

void BlockEvents::SyncAndComplete(const Pending& p, OnReady on_ready) {
  absl::Status synced = backend_->SynchronizeEvent(p.event);
  if (!synced.ok()) LogError("waiting for a freed block's event", p.event, synced);
  Complete(p, synced.ok(), on_ready);
}

void BlockEvents::Complete(const Pending& p, bool healthy, OnReady on_ready) {
  --outstanding_;
  if (p.pooled && healthy) {
    pool_.push_back(p.event);
  } else {
    Destroy(p.event);
  }
  if (--p.block->event_count == 0) on_ready(p.block);
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
    spdlog::error("allocator: GPU {}: {}{}: {} (treated as completed; later event errors "
                  "on this GPU are logged at debug level)",
                  device_.value(), what, which, status.ToString());
  } else {
    spdlog::debug("allocator: GPU {}: {}{}: {} (treated as completed)", device_.value(), what,
                  which, status.ToString());
  }
}

}  // namespace gpumux
