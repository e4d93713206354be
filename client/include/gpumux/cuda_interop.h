#pragma once

// libgpumux and the caller's own CUDA work (CUDA builds of libgpumux only;
// this header includes the CUDA runtime's).
//
// Memory: DeviceBuffer::data() is a device pointer into the daemon's segment,
// mapped with cudaIpcOpenMemHandle; launch kernels on it directly. When a
// buffer is freed (destroyed, or memory::Free) on a thread, libgpumux records
// an interprocess event on that thread's current CUDA stream (below) and the
// daemon reuses the memory only after it completed, so kernels still running
// on the memory are safe.
//
// Events: CudaIpcEvent opens an interprocess event in this process, e.g. a
// daemon copy's completion event, so the caller's stream waits for the copy
// on the GPU (torch.cuda.Event.from_ipc_handle for local work).

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// The stream the calling thread's own kernels run on, for free fences;
// cudaStreamLegacy (the legacy default stream, which orders after the
// device's blocking streams) until set.
void SetCurrentCudaStream(cudaStream_t stream);
cudaStream_t CurrentCudaStream();

// Sets the calling thread's current CUDA stream for a scope.
class CudaStreamGuard {
 public:
  explicit CudaStreamGuard(cudaStream_t stream) : previous_(CurrentCudaStream()) {
    SetCurrentCudaStream(stream);
  }
  ~CudaStreamGuard() { SetCurrentCudaStream(previous_); }
  CudaStreamGuard(const CudaStreamGuard&) = delete;
  CudaStreamGuard& operator=(const CudaStreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

// An interprocess event opened in this process (cudaIpcOpenEventHandle).
// Move-only; destroying it destroys this process's opening only.
class CudaIpcEvent {
 public:
  // `handle`: 64 bytes (Event::IpcHandle, a copy's completion event handle).
  // INVALID_ARGUMENT for a handle of the wrong size or one CUDA rejects.
  static absl::StatusOr<CudaIpcEvent> Open(absl::string_view handle);

  CudaIpcEvent(CudaIpcEvent&& other) noexcept;
  CudaIpcEvent& operator=(CudaIpcEvent&& other) noexcept;
  CudaIpcEvent(const CudaIpcEvent&) = delete;
  CudaIpcEvent& operator=(const CudaIpcEvent&) = delete;
  ~CudaIpcEvent();

  cudaEvent_t get() const { return event_; }
  // Later work on `stream` waits for the event's work (cudaStreamWaitEvent).
  absl::Status Wait(cudaStream_t stream) const;
  // Blocks until the event's work completed (cudaEventSynchronize).
  absl::Status Synchronize() const;
  // True once the event's work completed (cudaEventQuery).
  absl::StatusOr<bool> Query() const;

 private:
  explicit CudaIpcEvent(cudaEvent_t event) : event_(event) {}
  cudaEvent_t event_ = nullptr;
};

}  // namespace gpumux
