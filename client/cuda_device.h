#pragma once

// The client's CUDA devices (CUDA builds only): which of this process's
// ordinals a daemon device is, and a scope that makes one current.

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// This process's CUDA ordinal of the device with `pci_bus_id` (the current
// device for ""), cached; NOT_FOUND when no visible device has it (the
// client's CUDA_VISIBLE_DEVICES may differ from the daemon's).
absl::StatusOr<int> ResolveCudaDevice(absl::string_view pci_bus_id);

// Makes `device` current on this thread for a scope, restoring the caller's.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) status_ = cudaSetDevice(device);
  }
  ~CudaDeviceScope() {
    int current = -1;
    if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_)
      cudaSetDevice(previous_);
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;
  // cudaSetDevice's result (cudaSuccess when the device was current).
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace gpumux
