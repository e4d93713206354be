#include "gpumux/host_local_streams.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumux {

HostLocalStreams::StreamState& HostLocalStreams::StreamLocked(const StreamKey& key) {
  return streams_[key];
}

void HostLocalStreams::AdvanceLocked(const StreamKey& key, StreamState& stream) {
  if (stream.queue.empty()) return;
  const absl::Time now = absl::Now();
  const uint64_t ops = device_ops_[key.first];
  while (!stream.queue.empty()) {
    const Item& front = stream.queue.front();
    if (front.ready_at > now || front.ready_after_ops > ops) break;
    stream.done_seq = front.seq;
    stream.queue.pop_front();
  }
}

absl::Status HostLocalStreams::CheckNotCapturingLocked(DeviceIndex device, const char* what) {
  for (const StreamKey& key : capturing_) {
    if (key.first != device) continue;
    ++capture_violations_;
    return absl::FailedPreconditionError(
        absl::StrCat(what, " on device ", device.value(), " while stream ", key.second.value(),
                     " is capturing a graph: operation not permitted when stream is capturing"));
  }
  return absl::OkStatus();
}

void HostLocalStreams::WaitForLocked(const StreamKey& key, uint64_t seq) {
  ++synchronizations_;
  StreamState& stream = StreamLocked(key);
  AdvanceLocked(key, stream);
  absl::Time latest = absl::InfinitePast();
  for (const Item& item : stream.queue) {
    if (item.seq > seq) break;
    latest = std::max(latest, item.ready_at);
  }
  if (latest > absl::Now()) {
    // Nothing of this stream changes while the caller waits for the time
    // to pass: other streams go on meanwhile.
    mu_.Unlock();
    absl::SleepFor(latest - absl::Now());
    mu_.Lock();
  }
  // The CPU waited for the GPU: whatever it waited for is done, however many
  // operations behind the GPU was.
  StreamState& waited = StreamLocked(key);
  while (!waited.queue.empty() && waited.queue.front().seq <= seq) waited.queue.pop_front();
  waited.done_seq = std::max(waited.done_seq, seq);
}

absl::StatusOr<LocalEventId> HostLocalStreams::CreateEvent(DeviceIndex device) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_event_++;
  events_[id].device = device;
  return LocalEventId(id);
}

void HostLocalStreams::DestroyEvent(LocalEventId event) {
  absl::MutexLock lock(&mu_);
  events_.erase(event.value());
}

absl::Status HostLocalStreams::RecordEvent(LocalEventId event, DeviceIndex device,
                                           LocalStream stream) {
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value());
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat("local event ", event.value(), " does not exist"));
  }
  if (it->second.device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("local event ", event.value(), " was created on device ",
                     it->second.device.value(), ", not ", device.value()));
  }
  const StreamKey key{device, stream};
  if (capturing_.contains(key)) {
    // CUDA would make it a node of the graph, recording nothing now.
    ++capture_violations_;
    return absl::FailedPreconditionError(absl::StrCat(
        "recording an event on stream ", stream.value(), " while it captures a graph"));
  }
  it->second.stream = key;
  it->second.seq = StreamLocked(key).next_seq - 1;
  return absl::OkStatus();
}

absl::StatusOr<bool> HostLocalStreams::QueryEvent(LocalEventId event) {
  absl::MutexLock lock(&mu_);
  ++queries_;
  auto it = events_.find(event.value());
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat("local event ", event.value(), " does not exist"));
  }
  const EventState state = it->second;
  if (state.seq == 0) return true;
  if (absl::Status ok = CheckNotCapturingLocked(state.device, "querying an event"); !ok.ok()) {
    return ok;
  }
  StreamState& stream = StreamLocked(state.stream);
  AdvanceLocked(state.stream, stream);
  return stream.done_seq >= state.seq;
}

absl::Status HostLocalStreams::SynchronizeEvent(LocalEventId event) {
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value());
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat("local event ", event.value(), " does not exist"));
  }
  const EventState state = it->second;
  if (state.seq == 0) return absl::OkStatus();
  if (absl::Status ok = CheckNotCapturingLocked(state.device, "waiting for an event"); !ok.ok()) {
    return ok;
  }
  WaitForLocked(state.stream, state.seq);
  return absl::OkStatus();
}

absl::Status HostLocalStreams::SynchronizeStream(DeviceIndex device, LocalStream stream) {
  absl::MutexLock lock(&mu_);
  if (absl::Status ok = CheckNotCapturingLocked(device, "synchronizing a stream"); !ok.ok()) {
    return ok;
  }
  const StreamKey key{device, stream};
  WaitForLocked(key, StreamLocked(key).next_seq - 1);
  return absl::OkStatus();
}

bool HostLocalStreams::Capturing(DeviceIndex device, LocalStream stream) {
  absl::MutexLock lock(&mu_);
  return capturing_.contains(StreamKey{device, stream});
}

absl::Status HostLocalStreams::EnqueueWork(DeviceIndex device, LocalStream stream,
                                           absl::Duration duration) {
  if (duration < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("emulated work cannot take ", absl::FormatDuration(duration)));
  }
  absl::MutexLock lock(&mu_);
  const StreamKey key{device, stream};
  StreamState& state = StreamLocked(key);
  uint64_t& ops = device_ops_[device];
  ++ops;
  Item item;
  item.seq = state.next_seq++;
  item.ready_at = absl::Now() + duration;
  if (!state.queue.empty()) item.ready_at = std::max(item.ready_at, state.queue.back().ready_at);
  item.ready_after_ops = ops + options_.lag_operations;
  state.queue.push_back(item);
  return absl::OkStatus();
}

void HostLocalStreams::BeginCapture(DeviceIndex device, LocalStream stream) {
  absl::MutexLock lock(&mu_);
  capturing_.insert(StreamKey{device, stream});
}

void HostLocalStreams::EndCapture(DeviceIndex device, LocalStream stream) {
  absl::MutexLock lock(&mu_);
  capturing_.erase(StreamKey{device, stream});
}

bool HostLocalStreams::Idle(DeviceIndex device, LocalStream stream) {
  absl::MutexLock lock(&mu_);
  const StreamKey key{device, stream};
  StreamState& state = StreamLocked(key);
  AdvanceLocked(key, state);
  return state.queue.empty();
}

uint64_t HostLocalStreams::capture_violations() const {
  absl::MutexLock lock(&mu_);
  return capture_violations_;
}

uint64_t HostLocalStreams::synchronizations() const {
  absl::MutexLock lock(&mu_);
  return synchronizations_;
}

uint64_t HostLocalStreams::queries() const {
  absl::MutexLock lock(&mu_);
  return queries_;
}

}  // namespace gpumux
