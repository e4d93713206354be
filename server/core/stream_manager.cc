#include "server/core/stream_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/device_range.h"
#include "common/base/status_macros.h"
#include "gpumux/common/sealed_memory.h"
#include "server/core/session_registry.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

absl::Status StreamNotFound(StreamId stream) {
  return absl::NotFoundError(
      absl::StrCat("stream ", stream.value(), " not found: it is not a stream of this session"));
}

absl::Status EventNotFound(EventId event) {
  return absl::NotFoundError(
      absl::StrCat("event ", event.value(), " not found: it is not an event of this session"));
}

// Destroy errors only mean the backend already forgot the handle.
void LogIfError(const absl::Status& status, const char* what) {
  if (!status.ok()) spdlog::warn("{}: {}", what, status.ToString());
}

}  // namespace

StreamManager::~StreamManager() {
  absl::MutexLock lock(&mu_);
  for (const auto& [session, books] : books_) DestroyAll(books);
  books_.clear();
}

absl::Status StreamManager::CheckDevice(DeviceIndex device) const {
  return CheckDeviceInRange(device, backend_->device_count());
}

void StreamManager::AddSession(SessionId session, std::string tenant) {
  absl::MutexLock lock(&mu_);
  Books& books = books_[session];
  books.tenant = std::move(tenant);
  books.default_streams.assign(static_cast<size_t>(backend_->device_count()), BackendStream());
  books.async_errors.resize(static_cast<size_t>(backend_->device_count()));
}

StreamCounts StreamManager::ReleaseSession(SessionId session) {
  Books books;
  {
    absl::MutexLock lock(&mu_);
    auto it = books_.find(session);
    if (it == books_.end()) return {};
    books = std::move(it->second);
    books_.erase(it);
    total_streams_ -= books.streams.size();
    total_events_ -= books.events.size();
    tenant_streams_.Give(books.tenant, books.streams.size());
    tenant_events_.Give(books.tenant, books.events.size());
    size_t interprocess = 0;
    for (const auto& [id, event] : books.events) interprocess += event.flags.interprocess ? 1 : 0;
    tenant_ipc_events_.Give(books.tenant, interprocess);
  }
  DestroyAll(books);
  return StreamCounts{books.streams.size(), books.events.size()};
}

absl::Status StreamManager::DestroyBackendStream(DeviceIndex device, BackendStream stream) {
  return destroyer_ ? destroyer_(device, stream) : backend_->DestroyStream(stream);
}

void StreamManager::DestroyAll(const Books& books) {
  for (const auto& [id, event] : books.events)
    LogIfError(backend_->DestroyEvent(event.backend), "destroy event");
  for (const auto& [id, stream] : books.streams) {
    LogIfError(DestroyBackendStream(stream.device, stream.backend), "destroy stream");
  }
  for (size_t d = 0; d < books.default_streams.size(); ++d) {
    BackendStream stream = books.default_streams[d];
    if (stream.value() != 0) {
      LogIfError(DestroyBackendStream(DeviceIndex(static_cast<int32_t>(d)), stream),
                 "destroy default stream");
    }
  }
}

StreamCounts StreamManager::Counts(SessionId session) const {
  absl::MutexLock lock(&mu_);
  auto it = books_.find(session);
  if (it == books_.end()) return {};
  return StreamCounts{it->second.streams.size(), it->second.events.size()};
}

absl::StatusOr<StreamManager::Books*> StreamManager::BooksLocked(SessionId session) {
  auto it = books_.find(session);
  if (it == books_.end()) return SessionClosedError(session);
  return &it->second;
}

absl::StatusOr<StreamPriorityRange> StreamManager::PriorityRange(DeviceIndex device) const {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  return backend_->GetStreamPriorityRange(device);
}

absl::StatusOr<StreamManager::CreatedStream> StreamManager::CreateStream(SessionId session,
                                                                         DeviceIndex device,
                                                                         int priority) {
  GPUMUX_ASSIGN_OR_RETURN(StreamPriorityRange range, PriorityRange(device));
  // torch/cuda/streams.py clamps into [greatest, least] (greatest <= least).
  int clamped = std::clamp(priority, range.greatest, range.least);
  std::string tenant;
  {
    absl::MutexLock lock(&mu_);
    GPUMUX_ASSIGN_OR_RETURN(Books * books, BooksLocked(session));
    if (books->streams.size() >= kMaxStreamsPerSession) {
      return session_streams_refusal_.Refuse(
          absl::StrCat("session ", session.value(), " already has ", kMaxStreamsPerSession,
                       " streams, the most a session may hold; destroy some first"));
    }
    if (total_streams_ >= limits_.max_streams) {
      return streams_refusal_.Refuse(
          absl::StrCat("the daemon already serves ", total_streams_,
                       " streams, its limit (gpumuxd --max-streams=", limits_.max_streams,
                       "); destroy streams or ask the operator to raise the limit"));
    }
    GPUMUX_RETURN_IF_ERROR(tenant_streams_.Take(books->tenant, limits_.max_streams));
    tenant = books->tenant;
    ++total_streams_;  // held for this stream while it is created
  }
  // Creating a backend stream is a backend call: not under the lock.
  absl::StatusOr<BackendStream> created = backend_->CreateStream(device, clamped);
  absl::MutexLock lock(&mu_);
  if (!created.ok()) {
    --total_streams_;
    tenant_streams_.Give(tenant);
    return created.status();
  }
  const BackendStream backend = *created;
  absl::StatusOr<Books*> books = BooksLocked(session);
  if (!books.ok()) {
    --total_streams_;
    tenant_streams_.Give(tenant);
    // Never used, so no allocation waits on it: straight to the backend.
    LogIfError(backend_->DestroyStream(backend), "destroy stream");
    return books.status();
  }
  StreamId id(next_stream_id_++);
  (*books)->streams.emplace(id, StreamEntry{device, backend});
  return CreatedStream{id, clamped};
}

absl::Status StreamManager::DestroyStream(SessionId session, DeviceIndex device, StreamId stream) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (stream.value() == 0) {
    return absl::InvalidArgumentError(
        "the default stream (0) cannot be destroyed; it ends with the session");
  }
  BackendStream backend;
  {
    absl::MutexLock lock(&mu_);
    GPUMUX_ASSIGN_OR_RETURN(Books * books, BooksLocked(session));
    GPUMUX_ASSIGN_OR_RETURN(backend, FindStreamLocked(*books, device, stream));
    books->streams.erase(stream);
    --total_streams_;
    tenant_streams_.Give(books->tenant);
  }
  return DestroyBackendStream(device, backend);
}

absl::StatusOr<ResolvedStream> StreamManager::Resolve(SessionId session, DeviceIndex device,
                                                      StreamId stream) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  const size_t slot = static_cast<size_t>(device.value());
  {
    absl::MutexLock lock(&mu_);
    GPUMUX_ASSIGN_OR_RETURN(Books * books, BooksLocked(session));
    if (stream.value() != 0) {
      GPUMUX_ASSIGN_OR_RETURN(BackendStream backend, FindStreamLocked(*books, device, stream));
      return ResolvedStream{stream, device, backend};
    }
    if (books->default_streams[slot].value() != 0) {
      return ResolvedStream{stream, device, books->default_streams[slot]};
    }
  }
  // First use of this device's default stream: created outside the lock.
  GPUMUX_ASSIGN_OR_RETURN(BackendStream created, backend_->CreateStream(device, 0));
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Books*> books = BooksLocked(session);
  if (!books.ok()) {
    LogIfError(backend_->DestroyStream(created), "destroy default stream");  // never used
    return books.status();
  }
  BackendStream& slot_stream = (*books)->default_streams[slot];
  if (slot_stream.value() == 0) {
    slot_stream = created;
  } else {  // another call of this session created it meanwhile
    LogIfError(backend_->DestroyStream(created), "destroy default stream");  // never used
  }
  return ResolvedStream{stream, device, slot_stream};
}

absl::StatusOr<BackendStream> StreamManager::FindStreamLocked(const Books& books,
                                                              DeviceIndex device, StreamId stream) {
  auto it = books.streams.find(stream);
  if (it == books.streams.end()) return StreamNotFound(stream);
  if (it->second.device != device) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", stream.value(), " is on device ",
                                                   it->second.device.value(), ", not device ",
                                                   device.value()));
  }
  return it->second.backend;
}

absl::Status StreamManager::CheckStream(SessionId session, DeviceIndex device,
                                        StreamId stream) const {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  absl::MutexLock lock(&mu_);
  auto books = books_.find(session);
  if (books == books_.end()) return SessionClosedError(session);
  if (stream.value() == 0) return absl::OkStatus();
  return FindStreamLocked(books->second, device, stream).status();
}

absl::StatusOr<bool> StreamManager::QueryStream(SessionId session, DeviceIndex device,
                                                StreamId stream) {
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream resolved, Resolve(session, device, stream));
  return backend_->QueryStream(resolved.backend);
}

absl::Status StreamManager::SynchronizeStream(SessionId session, DeviceIndex device,
                                              StreamId stream) {
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream resolved, Resolve(session, device, stream));
  DeviceProfiler::Work profiled = DeviceProfiler::Begin(profiler_, session, "synchronize stream",
                                                        ProfiledSite{device, resolved.id}, 0);
  absl::Status status = backend_->SynchronizeStream(resolved.backend);
  DeviceProfiler::End(std::move(profiled), status.ok());
  if (!status.ok()) return status;
  return TakeAsyncError(session, device);
}

absl::StatusOr<bool> StreamManager::TrySynchronizeStream(SessionId session, DeviceIndex device,
                                                         StreamId stream) {
  GPUMUX_ASSIGN_OR_RETURN(const bool done, QueryStream(session, device, stream));
  if (done) GPUMUX_RETURN_IF_ERROR(TakeAsyncError(session, device));
  return done;
}

absl::Status StreamManager::WaitEvent(SessionId session, DeviceIndex device, StreamId stream,
                                      EventId event) {
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream resolved, Resolve(session, device, stream));
  GPUMUX_ASSIGN_OR_RETURN(EventEntry entry, FindEvent(session, event));
  DeviceProfiler::Work profiled = DeviceProfiler::Begin(
      profiler_, session, "wait event", ProfiledSite{device, resolved.id, resolved.backend}, 0);
  absl::Status status = backend_->StreamWaitEvent(resolved.backend, entry.backend);
  DeviceProfiler::End(std::move(profiled), status.ok());
  return status;
}

absl::Status StreamManager::WaitStream(SessionId session, DeviceIndex device, StreamId stream,
                                       DeviceIndex other_device, StreamId other) {
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream waiter, Resolve(session, device, stream));
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream waited, Resolve(session, other_device, other));
  if (waiter.backend == waited.backend) return absl::OkStatus();  // in order already
  // torch's wait_stream: record an event on `other`, wait on it. The event
  // can go at once: the wait captured what it recorded.
  GPUMUX_ASSIGN_OR_RETURN(BackendEvent event, backend_->CreateEvent(other_device, EventFlags{}));
  DeviceProfiler::Work profiled = DeviceProfiler::Begin(
      profiler_, session, "wait stream", ProfiledSite{device, waiter.id, waiter.backend}, 0);
  absl::Status status = backend_->RecordEvent(event, waited.backend);
  if (status.ok()) status = backend_->StreamWaitEvent(waiter.backend, event);
  DeviceProfiler::End(std::move(profiled), status.ok());
  LogIfError(backend_->DestroyEvent(event), "destroy wait_stream event");
  return status;
}

absl::StatusOr<EventView> StreamManager::AddEvent(SessionId session, DeviceIndex device,
                                                  EventFlags flags, BackendEvent backend) {
  absl::MutexLock lock(&mu_);
  absl::Status refused;
  absl::StatusOr<Books*> books = BooksLocked(session);
  if (!books.ok()) {
    refused = books.status();
  } else if ((*books)->events.size() >= kMaxEventsPerSession) {
    refused = session_events_refusal_.Refuse(
        absl::StrCat("session ", session.value(), " already has ", kMaxEventsPerSession,
                     " events, the most a session may hold; destroy some first"));
  } else if (total_events_ >= limits_.max_events) {
    refused = events_refusal_.Refuse(absl::StrCat(
        "the daemon already holds ", total_events_, " events, its limit (gpumuxd --max-events=",
        limits_.max_events, "); destroy events or ask the operator to raise the limit"));
  } else if (refused = tenant_events_.Take((*books)->tenant, limits_.max_events);
             refused.ok() && flags.interprocess) {
    refused = tenant_ipc_events_.Take((*books)->tenant, MemoryFileBudget());
    if (!refused.ok()) tenant_events_.Give((*books)->tenant);
  }
  if (!refused.ok()) {
    LogIfError(backend_->DestroyEvent(backend), "destroy event");
    return refused;
  }
  EventId id(next_event_id_++);
  (*books)->events.emplace(id, EventEntry{device, flags, backend});
  ++total_events_;
  return EventView{id, device, flags};
}

absl::StatusOr<EventView> StreamManager::CreateEvent(SessionId session, DeviceIndex device,
                                                     EventFlags flags) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (flags.interprocess && flags.enable_timing) {
    return absl::InvalidArgumentError(
        "an interprocess event cannot time: create it with enable_timing=false (CUDA requires "
        "cudaEventDisableTiming with cudaEventInterprocess)");
  }
  GPUMUX_ASSIGN_OR_RETURN(BackendEvent backend, backend_->CreateEvent(device, flags));
  return AddEvent(session, device, flags, backend);
}

absl::StatusOr<StreamManager::EventEntry> StreamManager::FindEvent(SessionId session,
                                                                   EventId event) const {
  absl::MutexLock lock(&mu_);
  auto books = books_.find(session);
  if (books == books_.end()) return SessionClosedError(session);
  auto it = books->second.events.find(event);
  if (it == books->second.events.end()) return EventNotFound(event);
  return it->second;
}

absl::Status StreamManager::DestroyEvent(SessionId session, EventId event) {
  BackendEvent backend;
  {
    absl::MutexLock lock(&mu_);
    GPUMUX_ASSIGN_OR_RETURN(Books * books, BooksLocked(session));
    auto it = books->events.find(event);
    if (it == books->events.end()) return EventNotFound(event);
    backend = it->second.backend;
    if (it->second.flags.interprocess) tenant_ipc_events_.Give(books->tenant);
    books->events.erase(it);
    --total_events_;
    tenant_events_.Give(books->tenant);
  }
  return backend_->DestroyEvent(backend);
}

absl::Status StreamManager::RecordEvent(SessionId session, EventId event, DeviceIndex device,
                                        StreamId stream) {
  GPUMUX_ASSIGN_OR_RETURN(EventEntry entry, FindEvent(session, event));
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream resolved, Resolve(session, device, stream));
  if (entry.device != device) {
    return absl::InvalidArgumentError(absl::StrCat("Event device ", entry.device.value(),
                                                   " does not match recording stream's device ",
                                                   device.value(), "."));
  }
  return backend_->RecordEvent(entry.backend, resolved.backend);
}

absl::StatusOr<bool> StreamManager::QueryEvent(SessionId session, EventId event) {
  GPUMUX_ASSIGN_OR_RETURN(EventEntry entry, FindEvent(session, event));
  return backend_->QueryEvent(entry.backend);
}

absl::Status StreamManager::SynchronizeEvent(SessionId session, EventId event) {
  GPUMUX_ASSIGN_OR_RETURN(EventEntry entry, FindEvent(session, event));
  DeviceProfiler::Work profiled =
      DeviceProfiler::Begin(profiler_, session, "synchronize event", ProfiledSite{entry.device}, 0);
  absl::Status status = backend_->SynchronizeEvent(entry.backend);
  DeviceProfiler::End(std::move(profiled), status.ok());
  if (!status.ok()) return status;
  return TakeAsyncError(session, entry.device);
}

absl::StatusOr<bool> StreamManager::TrySynchronizeEvent(SessionId session, EventId event) {
  GPUMUX_ASSIGN_OR_RETURN(EventEntry entry, FindEvent(session, event));
  GPUMUX_ASSIGN_OR_RETURN(const bool done, backend_->QueryEvent(entry.backend));
  if (done) GPUMUX_RETURN_IF_ERROR(TakeAsyncError(session, entry.device));
  return done;
}

void StreamManager::NoteAsyncError(SessionId session, DeviceIndex device, absl::Status status) {
  if (status.ok()) return;
  absl::MutexLock lock(&mu_);
  auto it = books_.find(session);
  if (it == books_.end()) return;
  std::vector<AsyncError>& errors = it->second.async_errors;
  if (device.value() < 0 || static_cast<size_t>(device.value()) >= errors.size()) return;
  AsyncError& error = errors[static_cast<size_t>(device.value())];
  if (error.first.ok()) {
    error.first = std::move(status);
  } else {
    ++error.later;
  }
}

absl::Status StreamManager::TakeAsyncError(SessionId session, DeviceIndex device) {
  AsyncError error;
  {
    absl::MutexLock lock(&mu_);
    auto it = books_.find(session);
    if (it == books_.end()) return absl::OkStatus();
    std::vector<AsyncError>& errors = it->second.async_errors;
    if (device.value() < 0 || static_cast<size_t>(device.value()) >= errors.size())
      return absl::OkStatus();
    error = std::exchange(errors[static_cast<size_t>(device.value())], AsyncError());
  }
  if (error.later == 0) return error.first;
  return absl::Status(error.first.code(),
                      absl::StrCat(error.first.message(), " (", error.later,
                                   " more queued after it on this device failed too)"));
}

absl::StatusOr<float> StreamManager::ElapsedTimeMs(SessionId session, EventId start, EventId end) {
  GPUMUX_ASSIGN_OR_RETURN(EventEntry first, FindEvent(session, start));
  GPUMUX_ASSIGN_OR_RETURN(EventEntry last, FindEvent(session, end));
  if (!first.flags.enable_timing || !last.flags.enable_timing) {
    return absl::FailedPreconditionError(
        "Both events must be created with argument 'enable_timing=True'.");
  }
  if (first.device != last.device) {  // CUDA cannot compare clocks of two devices
    return absl::InvalidArgumentError(absl::StrCat(
        "events ", start.value(), " and ", end.value(), " are on devices ", first.device.value(),
        " and ", last.device.value(), "; elapsed time needs both on one device"));
  }
  return backend_->ElapsedTimeMs(first.backend, last.backend);
}

absl::StatusOr<std::string> StreamManager::IpcHandle(SessionId session, EventId event) {
  GPUMUX_ASSIGN_OR_RETURN(EventEntry entry, FindEvent(session, event));
  if (!entry.flags.interprocess) {
    return absl::FailedPreconditionError(
        absl::StrCat("event ", event.value(),
                     " was not created with interprocess=true, so it has no IPC handle"));
  }
  return backend_->GetIpcEventHandle(entry.backend);
}

absl::StatusOr<EventView> StreamManager::OpenIpcHandle(SessionId session, DeviceIndex device,
                                                       absl::string_view handle) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (handle.size() != kIpcEventHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cudaIpcEventHandle_t expects byte-like object of size ", kIpcEventHandleBytes,
                     ", but got ", handle.size()));
  }
  GPUMUX_ASSIGN_OR_RETURN(BackendEvent backend, backend_->OpenIpcEventHandle(device, handle));
  return AddEvent(session, device, EventFlags{.interprocess = true}, backend);
}

}  // namespace gpumux
