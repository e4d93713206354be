// HostBackend's streams and events (host_backend.h); segments and address
// translation live in host_backend.cc, the work itself in host_backend_work.cc.

#include "server/backend/host/host_backend.h"

#include <cassert>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "gpumux/common/host_ipc_event.h"

namespace gpumux {

// ---- Streams ----
//
// Handles come from one counter for streams and events, so a stream handle
// passed as an event (or the reverse) is NOT_FOUND rather than another object.

namespace {

// Hopper's range: cudaDeviceGetStreamPriorityRange gives least 0, greatest -5.
constexpr StreamPriorityRange kPriorityRange{0, -5};

absl::Status StreamNotFound(BackendStream stream) {
  return absl::NotFoundError(absl::StrCat("host backend: no stream ", stream.value(),
                                          " (never created or already destroyed)"));
}

absl::Status EventNotFound(BackendEvent event) {
  return absl::NotFoundError(absl::StrCat("host backend: no event ", event.value(),
                                          " (never created or already destroyed)"));
}

}  // namespace

absl::Status HostBackend::Synchronize(DeviceIndex device) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  std::vector<std::shared_ptr<HostStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [handle, stream] : streams_) {
      if (stream->device() == device) streams.push_back(stream);
    }
    for (const auto& stream : retired_) {
      if (stream->device() == device) streams.push_back(stream);
    }
  }
  for (const auto& stream : streams) stream->Synchronize();
  return absl::OkStatus();
}

StreamPriorityRange HostBackend::GetStreamPriorityRange(DeviceIndex device) const {
  assert(device.value() >= 0 && device.value() < device_count());
  (void)device;
  return kPriorityRange;
}

std::vector<std::shared_ptr<HostStream>> HostBackend::TakeFinishedLocked() {
  std::vector<std::shared_ptr<HostStream>> finished;
  auto keep = retired_.begin();
  for (auto it = retired_.begin(); it != retired_.end(); ++it) {
    if ((*it)->Finished()) {
      finished.push_back(std::move(*it));
    } else {
      *keep++ = std::move(*it);
    }
  }
  retired_.erase(keep, retired_.end());
  return finished;
}

absl::StatusOr<BackendStream> HostBackend::CreateStream(DeviceIndex device, int priority) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (priority > kPriorityRange.least || priority < kPriorityRange.greatest) {
    return absl::InvalidArgumentError(
        absl::StrCat("host device ", device.value(), ": stream priority ", priority,
                     " is outside [", kPriorityRange.greatest, ", ", kPriorityRange.least,
                     "] (lower is higher priority; clamp to the range)"));
  }
  std::vector<std::shared_ptr<HostStream>> finished;
  uint64_t handle = 0;
  {
    absl::MutexLock lock(&mu_);
    finished = TakeFinishedLocked();
    handle = next_handle_++;
  }
  std::shared_ptr<HostStream> stream = HostStream::Create(*stream_pool_, device, priority);
  absl::MutexLock lock(&mu_);
  streams_.emplace(handle, std::move(stream));
  return BackendStream(handle);
}

absl::Status HostBackend::DestroyStream(BackendStream stream) {
  std::vector<std::shared_ptr<HostStream>> finished;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream.value());
    if (it == streams_.end()) return StreamNotFound(stream);
    // Returns at once, like cudaStreamDestroy: the pool runs what is queued;
    // a later creation or destruction drops the stream once it finished.
    it->second->Stop();
    retired_.push_back(std::move(it->second));
    streams_.erase(it);
    finished = TakeFinishedLocked();
  }
  return absl::OkStatus();  // `finished` is released here, outside the lock
}

absl::StatusOr<std::shared_ptr<HostStream>> HostBackend::FindStream(BackendStream stream) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream.value());
  if (it == streams_.end()) return StreamNotFound(stream);
  return it->second;
}

absl::StatusOr<bool> HostBackend::QueryStream(BackendStream stream) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  return s->Query();
}

absl::Status HostBackend::SynchronizeStream(BackendStream stream) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  s->Synchronize();
  return absl::OkStatus();
}

absl::Status HostBackend::Submit(HostStream& stream, BackendStream handle, HostStream::Work work) {
  // Only fails when DestroyStream raced with this call: to the caller the
  // stream is gone.
  if (!stream.Enqueue(std::move(work)).ok()) return StreamNotFound(handle);
  return absl::OkStatus();
}

absl::StatusOr<StreamHold> HostBackend::HoldStream(BackendStream stream,
                                                   absl::AnyInvocable<void() &&> reached) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  // A plain event of the hold's own: the stream parks on its record (no
  // worker waits) until the hold completes it.
  auto released = std::make_shared<HostEvent>(s->device(), EventFlags{});
  const uint64_t generation = released->Record();
  if (!s->EnqueueHold(std::move(reached), released, generation).ok()) {
    return StreamNotFound(stream);  // DestroyStream raced with this call
  }
  return StreamHold([released, generation] { released->Complete(generation); });
}

// ---- Events ----

BackendEvent HostBackend::AddEvent(std::shared_ptr<HostEvent> event) {
  absl::MutexLock lock(&mu_);
  const uint64_t handle = next_handle_++;
  events_.emplace(handle, std::move(event));
  return BackendEvent(handle);
}

absl::StatusOr<std::shared_ptr<HostEvent>> HostBackend::FindEvent(BackendEvent event) {
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value());
  if (it == events_.end()) return EventNotFound(event);
  return it->second;
}

absl::StatusOr<BackendEvent> HostBackend::CreateEvent(DeviceIndex device, EventFlags flags) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (!flags.interprocess) return AddEvent(std::make_shared<HostEvent>(device, flags));
  if (flags.enable_timing) {
    return absl::InvalidArgumentError(
        "an interprocess event cannot measure time: create it with enable_timing=False "
        "(CUDA requires cudaEventDisableTiming with cudaEventInterprocess)");
  }
  GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<HostIpcEvent> created,
                          HostIpcEvent::Create(absl::StrCat("gpumux-d", device.value(), "-event")));
  std::shared_ptr<HostIpcEvent> ipc = std::move(created);
  std::string key = memory_files_->Add(ipc->memory());
  std::string handle = MakeHostIpcEventHandle(key);
  const BackendEvent event = AddEvent(std::make_shared<HostEvent>(device, flags, ipc, handle));
  absl::MutexLock lock(&mu_);
  own_ipc_events_.emplace(std::move(key),
                          OwnIpcEvent{event, device, std::move(ipc), std::move(handle)});
  return event;
}

absl::Status HostBackend::DestroyEvent(BackendEvent event) {
  std::shared_ptr<HostEvent> doomed;  // released outside the lock (unmaps)
  OwnIpcEvent own_doomed;
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value());
  if (it == events_.end()) return EventNotFound(event);
  doomed = std::move(it->second);
  events_.erase(it);
  if (doomed->ipc() != nullptr) {
    // The creator's destruction ends the handle (cudaEventDestroy's rule);
    // events opened from it keep the block they share.
    absl::StatusOr<std::string> key = HostIpcEventKey(doomed->ipc_handle());
    auto own = key.ok() ? own_ipc_events_.find(*key) : own_ipc_events_.end();
    if (own != own_ipc_events_.end() && own->second.event == event) {
      memory_files_->Remove(own->first);
      own_doomed = std::move(own->second);
      own_ipc_events_.erase(own);
    }
  }
  return absl::OkStatus();
}

absl::Status HostBackend::RecordEvent(BackendEvent event, BackendStream stream) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostEvent> e, FindEvent(event));
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (e->device() != s->device()) {
    // torch.cuda.Event.record's wording.
    return absl::InvalidArgumentError(absl::StrCat("Event device ", e->device().value(),
                                                   " does not match recording stream's device ",
                                                   s->device().value(), "."));
  }
  // The generation is taken under the stream's lock, so records of one event
  // on one stream complete in generation order.
  absl::Status queued = s->EnqueueFrom([&e]() -> HostStream::Work {
    return [e, generation = e->Record()] { e->Complete(generation); };
  });
  if (!queued.ok()) return StreamNotFound(stream);
  return absl::OkStatus();
}

absl::StatusOr<bool> HostBackend::QueryEvent(BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostEvent> e, FindEvent(event));
  return e->IsComplete(e->recorded());
}

absl::Status HostBackend::SynchronizeEvent(BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostEvent> e, FindEvent(event));
  if (!e->Wait(e->recorded(), &shutting_down_)) {
    return absl::UnavailableError(
        "gpumuxd is shutting down: gave up waiting for an interprocess event");
  }
  return absl::OkStatus();
}

absl::Status HostBackend::StreamWaitEvent(BackendStream stream, BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostEvent> e, FindEvent(event));
  const uint64_t generation = e->recorded();  // the capture as of this call
  if (generation == 0) return absl::OkStatus();
  // Parks the stream rather than blocking a pool thread (HostStream); an
  // interprocess wait gives up once shutting_down_ is set (HostStreamPool).
  if (!s->EnqueueWait(std::move(e), generation).ok()) return StreamNotFound(stream);
  return absl::OkStatus();
}

absl::StatusOr<float> HostBackend::ElapsedTimeMs(BackendEvent start, BackendEvent end) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostEvent> s, FindEvent(start));
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostEvent> e, FindEvent(end));
  // torch.cuda.Event.elapsed_time's wording.
  if (!s->flags().enable_timing || !e->flags().enable_timing) {
    return absl::FailedPreconditionError(
        "Both events must be created with argument 'enable_timing=True'.");
  }
  const uint64_t start_generation = s->recorded();
  const uint64_t end_generation = e->recorded();
  if (start_generation == 0 || end_generation == 0) {
    return absl::FailedPreconditionError(
        "Both events must be recorded before calculating elapsed time.");
  }
  if (!s->IsComplete(start_generation) || !e->IsComplete(end_generation)) {
    return absl::FailedPreconditionError(
        "Both events must have completed before calculating elapsed time (cudaErrorNotReady); "
        "synchronize the end event first.");
  }
  return static_cast<float>(static_cast<double>(e->completed_at_ns() - s->completed_at_ns()) / 1e6);
}

absl::StatusOr<std::string> HostBackend::GetIpcEventHandle(BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostEvent> e, FindEvent(event));
  if (e->ipc() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("event ", event.value(),
                     " is not interprocess: create it with interprocess=True to share it"));
  }
  return e->ipc_handle();
}

absl::StatusOr<BackendEvent> HostBackend::OpenIpcEventHandle(DeviceIndex device,
                                                             absl::string_view handle) {
  static_assert(kIpcEventHandleBytes == kHostIpcEventHandleBytes);
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  GPUMUX_ASSIGN_OR_RETURN(std::string key, HostIpcEventKey(handle));
  std::shared_ptr<HostIpcEvent> ipc;
  {
    absl::MutexLock lock(&mu_);
    auto own = own_ipc_events_.find(key);
    if (own == own_ipc_events_.end()) {
      return absl::NotFoundError(
          "the interprocess event handle names no live event of this daemon (its creator destroyed "
          "it, "
          "its session ended, or it came from another daemon)");
    }
    // An event of this backend knows its device, as CUDA's do.
    if (own->second.device != device) {
      return absl::InvalidArgumentError(
          absl::StrCat("the interprocess event handle names an event of device ",
                       own->second.device.value(), ", not device ", device.value()));
    }
    ipc = own->second.ipc;
  }
  EventFlags flags;
  flags.interprocess = true;
  return AddEvent(std::make_shared<HostEvent>(device, flags, std::move(ipc), std::string(handle)));
}

}  // namespace gpumux
