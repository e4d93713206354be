// CudaBackend's streams and events.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "server/backend/cuda/cuda_backend.h"
#include "spdlog/spdlog.h"

namespace gpumux {

// One cudaEvent_t. Destroyed (cudaEventDestroy) with the last handle naming it.
struct CudaBackend::EventObject {
  EventObject(DeviceIndex device_in, cudaEvent_t event_in) : device(device_in), event(event_in) {}
  ~EventObject() {
    int current = -1;
    cudaGetDevice(&current);
    if (current != device.value()) cudaSetDevice(device.value());
    cudaEventDestroy(event);
  }
  EventObject(const EventObject&) = delete;
  EventObject& operator=(const EventObject&) = delete;

  const DeviceIndex device;
  const cudaEvent_t event;
  // Set by RecordEvent here; events opened from another process's handle may
  // have been recorded there, so they count as recorded.
  std::atomic<bool> recorded{false};
  // Interprocess events: the handle bytes.
  std::string ipc_handle;
};

namespace {

absl::Status StreamNotFound(BackendStream stream) {
  return absl::NotFoundError(absl::StrCat("CUDA backend: no stream ", stream.value(),
                                          " (never created or already destroyed)"));
}

absl::Status EventNotFound(BackendEvent event) {
  return absl::NotFoundError(absl::StrCat("CUDA backend: no event ", event.value(),
                                          " (never created or already destroyed)"));
}

}  // namespace

template <typename Query>
absl::Status CudaBackend::Wait(DeviceIndex device, absl::string_view what, Query query) {
  // Polls: a blocking CUDA call could not be given up at shutdown. The first
  // 100 us spin (short work answers at once); after that each sleep is an
  // eighth of the time waited so far (at most 1 ms), so a wait overshoots
  // the work it waits for by about 12% at worst.
  constexpr auto kSpin = std::chrono::microseconds(100);
  constexpr auto kMaxSleep = std::chrono::microseconds(1000);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t error = static_cast<cudaError_t>(query());
    if (error == cudaSuccess) return absl::OkStatus();
    if (!CudaNotReady(error)) return Check(device, error, what);
    if (abandon_waits_.load(std::memory_order_relaxed)) {
      return absl::UnavailableError(absl::StrCat("gpumuxd is shutting down: gave up waiting (",
                                                 what, ") on CUDA device ", device.value()));
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited < kSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(waited / 8, kMaxSleep));
    }
  }
}

absl::Status CudaBackend::Synchronize(DeviceIndex device) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  // cudaDeviceSynchronize cannot be given up; an event recorded on every
  // stream of the device can. Streams created meanwhile are not waited for,
  // as with a device synchronize that started before them.
  std::vector<std::shared_ptr<CUstream_st>> streams;
  std::vector<std::shared_ptr<CUevent_st>> drains;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [handle, stream] : streams_) {
      if (stream.device == device) streams.push_back(stream.handle);
    }
    // Destroyed streams still draining.
    for (const Draining& d : draining_) {
      if (d.device == device) drains.push_back(d.done);
    }
  }
  std::vector<cudaStream_t> raw = {devices_[device.value()]->internal_stream};
  for (const std::shared_ptr<CUstream_st>& stream : streams) raw.push_back(stream.get());
  for (cudaStream_t stream : raw) {
    GPUMUX_RETURN_IF_ERROR(Wait(device, "synchronizing the device",
                                [stream] { return static_cast<int>(cudaStreamQuery(stream)); }));
  }
  for (const std::shared_ptr<CUevent_st>& drain : drains) {
    GPUMUX_RETURN_IF_ERROR(Wait(device, "synchronizing the device", [&drain] {
      return static_cast<int>(cudaEventQuery(drain.get()));
    }));
  }
  ReapKeepAlives();
  return absl::OkStatus();
}

void CudaBackend::PruneDrainingLocked() {
  auto keep = std::partition(draining_.begin(), draining_.end(), [](const Draining& d) {
    return CudaNotReady(cudaEventQuery(d.done.get()));
  });
  draining_.erase(keep, draining_.end());
}

// ---- Streams ----

StreamPriorityRange CudaBackend::GetStreamPriorityRange(DeviceIndex device) const {
  return devices_[device.value()]->priorities;
}

absl::StatusOr<BackendStream> CudaBackend::CreateStream(DeviceIndex device, int priority) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  const StreamPriorityRange range = devices_[device.value()]->priorities;
  if (priority > range.least || priority < range.greatest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device.value(), ": stream priority ", priority, " is outside [",
        range.greatest, ", ", range.least, "] (lower is higher priority; clamp to the range)"));
  }
  cudaStream_t stream = nullptr;
  GPUMUX_RETURN_IF_ERROR(
      Check(device, cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority),
            "cudaStreamCreateWithPriority"));
  std::shared_ptr<CUstream_st> owned(stream, [](cudaStream_t s) { cudaStreamDestroy(s); });
  absl::MutexLock lock(&mu_);
  const uint64_t handle = next_handle_++;
  streams_.emplace(handle, Stream{device, std::move(owned)});
  return BackendStream(handle);
}

absl::Status CudaBackend::DestroyStream(BackendStream stream) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream.value());
  if (it == streams_.end()) return StreamNotFound(stream);
  const Stream doomed = std::move(it->second);
  streams_.erase(it);
  PruneDrainingLocked();
  GPUMUX_RETURN_IF_ERROR(UseDevice(doomed.device));
  // Synchronize(device) must still wait for the work queued here.
  cudaEvent_t drain = nullptr;
  if (cudaEventCreateWithFlags(&drain, cudaEventDisableTiming) == cudaSuccess) {
    std::shared_ptr<CUevent_st> owned(drain, [](cudaEvent_t e) { cudaEventDestroy(e); });
    if (cudaEventRecord(drain, doomed.get()) == cudaSuccess) {
      draining_.push_back(Draining{doomed.device, std::move(owned)});
    }
  }
  // cudaStreamDestroy once calls in flight on it let go; it returns at once
  // and the work already queued still completes.
  return absl::OkStatus();
}

absl::StatusOr<CudaBackend::Stream> CudaBackend::FindStream(BackendStream stream) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream.value());
  if (it == streams_.end()) return StreamNotFound(stream);
  return it->second;
}

absl::StatusOr<bool> CudaBackend::QueryStream(BackendStream stream) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  const cudaError_t error = cudaStreamQuery(s.get());
  if (CudaNotReady(error)) return false;
  GPUMUX_RETURN_IF_ERROR(Check(s.device, error, "cudaStreamQuery"));
  return true;
}

absl::Status CudaBackend::SynchronizeStream(BackendStream stream) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  GPUMUX_RETURN_IF_ERROR(Wait(s.device, "synchronizing a stream",
                              [&s] { return static_cast<int>(cudaStreamQuery(s.get())); }));
  ReapKeepAlives();
  return absl::OkStatus();
}

// ---- Events ----

BackendEvent CudaBackend::AddEvent(Event event, bool foreign) {
  absl::MutexLock lock(&mu_);
  const uint64_t handle = next_handle_++;
  if (!event.object->ipc_handle.empty()) {
    if (foreign && ipc_events_.size() >= kMaxKeptIpcEvents) {
      // Close the least recently used opening (a linear scan, once per
      // kMaxKeptIpcEvents new handles at most).
      auto oldest = ipc_events_.end();
      for (auto it = ipc_events_.begin(); it != ipc_events_.end(); ++it) {
        if (it->second.kept != nullptr &&
            (oldest == ipc_events_.end() || it->second.last_use < oldest->second.last_use)) {
          oldest = it;
        }
      }
      if (oldest != ipc_events_.end()) ipc_events_.erase(oldest);
    }
    IpcEvent& entry = ipc_events_[event.object->ipc_handle];
    entry.object = event.object;
    entry.kept = foreign ? event.object : nullptr;
    entry.last_use = ++ipc_event_uses_;
  }
  events_.emplace(handle, std::move(event));
  return BackendEvent(handle);
}

absl::StatusOr<CudaBackend::Event> CudaBackend::FindEvent(BackendEvent event) const {
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value());
  if (it == events_.end()) return EventNotFound(event);
  return it->second;
}

absl::StatusOr<BackendEvent> CudaBackend::CreateEvent(DeviceIndex device, EventFlags flags) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  if (flags.interprocess && flags.enable_timing) {
    return absl::InvalidArgumentError(
        "an interprocess event cannot measure time: create it with enable_timing=False "
        "(CUDA requires cudaEventDisableTiming with cudaEventInterprocess)");
  }
  unsigned int cuda_flags = flags.enable_timing ? cudaEventDefault : cudaEventDisableTiming;
  if (flags.blocking) cuda_flags |= cudaEventBlockingSync;
  if (flags.interprocess) cuda_flags |= cudaEventInterprocess;
  cudaEvent_t raw = nullptr;
  GPUMUX_RETURN_IF_ERROR(
      Check(device, cudaEventCreateWithFlags(&raw, cuda_flags), "cudaEventCreateWithFlags"));
  auto object = std::make_shared<EventObject>(device, raw);
  if (flags.interprocess) {
    cudaIpcEventHandle_t handle;
    GPUMUX_RETURN_IF_ERROR(
        Check(device, cudaIpcGetEventHandle(&handle, raw), "cudaIpcGetEventHandle"));
    object->ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  }
  return AddEvent(Event{device, flags, std::move(object)});
}

absl::Status CudaBackend::DestroyEvent(BackendEvent event) {
  Event doomed;  // destroyed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value());
  if (it == events_.end()) return EventNotFound(event);
  doomed = std::move(it->second);
  events_.erase(it);
  if (!doomed.object->ipc_handle.empty() && doomed.object.use_count() == 1) {
    ipc_events_.erase(doomed.object->ipc_handle);
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RecordEvent(BackendEvent event, BackendStream stream) {
  GPUMUX_ASSIGN_OR_RETURN(Event e, FindEvent(event));
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  if (e.device != s.device) {
    // torch.cuda.Event.record's wording.
    return absl::InvalidArgumentError(absl::StrCat("Event device ", e.device.value(),
                                                   " does not match recording stream's device ",
                                                   s.device.value(), "."));
  }
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  GPUMUX_RETURN_IF_ERROR(
      Check(s.device, cudaEventRecord(e.object->event, s.get()), "cudaEventRecord"));
  e.object->recorded.store(true, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaBackend::QueryEvent(BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(Event e, FindEvent(event));
  GPUMUX_RETURN_IF_ERROR(UseDevice(e.device));
  const cudaError_t error = cudaEventQuery(e.object->event);
  if (CudaNotReady(error)) return false;
  GPUMUX_RETURN_IF_ERROR(Check(e.device, error, "cudaEventQuery"));
  return true;
}

absl::Status CudaBackend::SynchronizeEvent(BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(Event e, FindEvent(event));
  GPUMUX_RETURN_IF_ERROR(UseDevice(e.device));
  GPUMUX_RETURN_IF_ERROR(Wait(e.device, "synchronizing an event",
                              [&e] { return static_cast<int>(cudaEventQuery(e.object->event)); }));
  ReapKeepAlives();
  return absl::OkStatus();
}

absl::Status CudaBackend::StreamWaitEvent(BackendStream stream, BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_ASSIGN_OR_RETURN(Event e, FindEvent(event));
  GPUMUX_RETURN_IF_ERROR(UseDevice(e.device));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  return Check(s.device, cudaStreamWaitEvent(s.get(), e.object->event, 0), "cudaStreamWaitEvent");
}

absl::StatusOr<float> CudaBackend::ElapsedTimeMs(BackendEvent start, BackendEvent end) {
  GPUMUX_ASSIGN_OR_RETURN(Event s, FindEvent(start));
  GPUMUX_ASSIGN_OR_RETURN(Event e, FindEvent(end));
  // torch.cuda.Event.elapsed_time's wording.
  if (!s.flags.enable_timing || !e.flags.enable_timing) {
    return absl::FailedPreconditionError(
        "Both events must be created with argument 'enable_timing=True'.");
  }
  if (!s.object->recorded.load() || !e.object->recorded.load()) {
    return absl::FailedPreconditionError(
        "Both events must be recorded before calculating elapsed time.");
  }
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  float ms = 0;
  const cudaError_t error = cudaEventElapsedTime(&ms, s.object->event, e.object->event);
  if (CudaNotReady(error)) {
    return absl::FailedPreconditionError(
        "Both events must have completed before calculating elapsed time (cudaErrorNotReady); "
        "synchronize the end event first.");
  }
  GPUMUX_RETURN_IF_ERROR(Check(s.device, error, "cudaEventElapsedTime"));
  return ms;
}

absl::StatusOr<std::string> CudaBackend::GetIpcEventHandle(BackendEvent event) {
  GPUMUX_ASSIGN_OR_RETURN(Event e, FindEvent(event));
  if (!e.flags.interprocess) {
    return absl::FailedPreconditionError(
        absl::StrCat("event ", event.value(),
                     " is not interprocess: create it with interprocess=True to share it"));
  }
  return e.object->ipc_handle;
}

absl::StatusOr<BackendEvent> CudaBackend::OpenIpcEventHandle(DeviceIndex device,
                                                             absl::string_view handle) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  if (handle.size() != sizeof(cudaIpcEventHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("an interprocess event handle has ",
                                                   sizeof(cudaIpcEventHandle_t), " bytes, not ",
                                                   handle.size()));
  }
  EventFlags flags;
  flags.interprocess = true;
  {
    // CUDA cannot open a handle in the process that exported it, and opening
    // one handle once is enough: share the event already here.
    absl::MutexLock lock(&mu_);
    auto it = ipc_events_.find(handle);
    if (it != ipc_events_.end()) {
      if (std::shared_ptr<EventObject> object = it->second.object.lock()) {
        if (object->device != device) {
          return absl::InvalidArgumentError(
              absl::StrCat("the interprocess event handle names an event of device ",
                           object->device.value(), ", not device ", device.value()));
        }
        it->second.last_use = ++ipc_event_uses_;
        const uint64_t id = next_handle_++;
        events_.emplace(id, Event{object->device, flags, std::move(object)});
        return BackendEvent(id);
      }
    }
  }
  cudaIpcEventHandle_t ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  cudaEvent_t raw = nullptr;
  const cudaError_t error = cudaIpcOpenEventHandle(&raw, ipc);
  if (error != cudaSuccess) {
    absl::Status status = Check(device, error, "cudaIpcOpenEventHandle");
    if (absl::IsUnavailable(status)) return status;  // the device, not the handle
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open the interprocess event handle: ", status.message()));
  }
  auto object = std::make_shared<EventObject>(device, raw);
  object->recorded.store(true);
  object->ipc_handle = std::string(handle);
  return AddEvent(Event{device, flags, std::move(object)}, /*foreign=*/true);
}

}  // namespace gpumux
