#include "client/cuda_local_streams.h"

#include <cuda_runtime_api.h>

#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cuda_device.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "gpumux/cuda_interop.h"

namespace gpumux {
namespace {

// cudaStreamPerThread's value: NULL, cudaStreamLegacy and it are the
// current device's default streams.
constexpr uint64_t kLastDefaultStream = 2;

cudaStream_t ToCuda(LocalStream stream) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream.value()));
}

// Relaxed capture mode for a scope (PyTorch's CUDAStreamCaptureModeGuard):
// the calls in it are allowed while another thread captures a graph in
// global mode, and do not invalidate that capture.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() : mode_(cudaStreamCaptureModeRelaxed) {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      ResetCudaError();
      restore_ = false;
    }
  }
  ~RelaxedCaptureMode() {
    if (restore_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_;
  bool restore_ = true;
};

class CudaLocalStreams final : public LocalStreams {
 public:
  explicit CudaLocalStreams(std::function<absl::StatusOr<std::string>(DeviceIndex)> pci_bus_id)
      : pci_bus_id_(std::move(pci_bus_id)) {}

  ~CudaLocalStreams() override {
    for (const auto& [id, event] : events_) cudaEventDestroy(event.event);
  }

  absl::StatusOr<LocalEventId> CreateEvent(DeviceIndex device) override {
    GPUMUX_ASSIGN_OR_RETURN(const int ordinal, Ordinal(device));
    CudaDeviceScope scope(ordinal);
    GPUMUX_RETURN_IF_ERROR(CudaStatus(scope.status(), "cudaSetDevice"));
    cudaEvent_t event = nullptr;
    GPUMUX_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                      "cudaEventCreateWithFlags"));
    absl::MutexLock lock(&mu_);
    const uint64_t id = next_event_++;
    events_[id] = Event{event, device, ordinal};
    return LocalEventId(id);
  }

  void DestroyEvent(LocalEventId event) override {
    cudaEvent_t doomed = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto it = events_.find(event.value());
      if (it == events_.end()) return;
      doomed = it->second.event;
      events_.erase(it);
    }
    cudaEventDestroy(doomed);
  }

  absl::Status RecordEvent(LocalEventId event, DeviceIndex device, LocalStream stream) override {
    GPUMUX_ASSIGN_OR_RETURN(const Event found, Find(event));
    if (found.device != device) {
      return absl::InvalidArgumentError(
          absl::StrCat("local event ", event.value(), " was created on device ",
                       found.device.value(), ", not ", device.value()));
    }
    CudaDeviceScope scope(found.ordinal);
    GPUMUX_RETURN_IF_ERROR(CudaStatus(scope.status(), "cudaSetDevice"));
    return CudaStatus(cudaEventRecord(found.event, ToCuda(stream)), "cudaEventRecord");
  }

  absl::StatusOr<bool> QueryEvent(LocalEventId event) override {
    GPUMUX_ASSIGN_OR_RETURN(const Event found, Find(event));
    RelaxedCaptureMode relaxed;
    const cudaError_t e = cudaEventQuery(found.event);
    if (CudaNotReady(e)) return false;
    GPUMUX_RETURN_IF_ERROR(CudaStatus(e, "cudaEventQuery"));
    return true;
  }

  absl::Status SynchronizeEvent(LocalEventId event) override {
    GPUMUX_ASSIGN_OR_RETURN(const Event found, Find(event));
    RelaxedCaptureMode relaxed;
    return CudaStatus(cudaEventSynchronize(found.event), "cudaEventSynchronize");
  }

  absl::Status SynchronizeStream(DeviceIndex device, LocalStream stream) override {
    GPUMUX_ASSIGN_OR_RETURN(const int ordinal, Ordinal(device));
    CudaDeviceScope scope(ordinal);
    GPUMUX_RETURN_IF_ERROR(CudaStatus(scope.status(), "cudaSetDevice"));
    RelaxedCaptureMode relaxed;
    return CudaStatus(cudaStreamSynchronize(ToCuda(stream)), "cudaStreamSynchronize");
  }

  // The allocator asks only on its slow paths (an event to query, a lease
  // to take), so this costs a cache hit nothing.
  bool Capturing(DeviceIndex device, LocalStream stream) override {
    std::optional<CudaDeviceScope> scope;
    if (stream.value() <= kLastDefaultStream) {
      // The default streams (NULL, legacy, per-thread) are the current
      // device's.
      absl::StatusOr<int> ordinal = Ordinal(device);
      if (!ordinal.ok()) return false;
      scope.emplace(*ordinal);
    }
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(ToCuda(stream), &status) != cudaSuccess) {
      // The legacy stream while another stream captures in global mode:
      // anything queued there now would break that capture.
      ResetCudaError();
      return true;
    }
    return status != cudaStreamCaptureStatusNone;
  }

  absl::Status EnqueueWork(DeviceIndex, LocalStream, absl::Duration) override {
    return absl::FailedPreconditionError(
        "emulated GPU work needs a host-backend daemon: on CUDA the streams are real");
  }

 private:
  struct Event {
    cudaEvent_t event = nullptr;
    DeviceIndex device;
    int ordinal = 0;
  };

  absl::StatusOr<Event> Find(LocalEventId event) const {
    absl::MutexLock lock(&mu_);
    auto it = events_.find(event.value());
    if (it == events_.end()) {
      return absl::NotFoundError(absl::StrCat("local event ", event.value(), " does not exist"));
    }
    return it->second;
  }

  absl::StatusOr<int> Ordinal(DeviceIndex device) {
    {
      absl::MutexLock lock(&mu_);
      if (auto it = ordinals_.find(device); it != ordinals_.end()) return it->second;
    }
    GPUMUX_ASSIGN_OR_RETURN(const std::string pci_bus_id, pci_bus_id_(device));
    GPUMUX_ASSIGN_OR_RETURN(const int ordinal, ResolveCudaDevice(pci_bus_id));
    absl::MutexLock lock(&mu_);
    ordinals_[device] = ordinal;
    return ordinal;
  }

  const std::function<absl::StatusOr<std::string>(DeviceIndex)> pci_bus_id_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Event> events_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<DeviceIndex, int> ordinals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<LocalStreams> MakeCudaLocalStreams(
    std::function<absl::StatusOr<std::string>(DeviceIndex)> pci_bus_id) {
  return std::make_unique<CudaLocalStreams>(std::move(pci_bus_id));
}

LocalStream CurrentCudaLocalStream() {
  return LocalStream(reinterpret_cast<uintptr_t>(CurrentCudaStream()));
}

}  // namespace gpumux
