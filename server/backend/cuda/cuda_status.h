#pragma once

// CUDA runtime errors as absl::Status, in one place (STYLE: translate at the
// boundary). Also decides which errors are sticky: those that leave the
// device's context unusable until the process restarts.

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// For results of cudaStreamQuery / cudaEventQuery: true for
// cudaErrorNotReady, which it also clears from the thread's last-error slot
// (otherwise the next kernel launch's cudaGetLastError reports it).
inline bool NotReady(cudaError_t error) {
  if (error != cudaErrorNotReady) return false;
  cudaGetLastError();
  return true;
}

// True for errors after which every later call on the context fails the same
// way (cudaErrorIllegalAddress, cudaErrorLaunchFailure, an uncorrectable ECC
// error, ...): the device must be reported unhealthy.
bool IsStickyCudaError(cudaError_t error);

// OK for cudaSuccess. Otherwise "<what>: <cudaGetErrorName> (<cudaGetErrorString>)"
// with a code by kind: RESOURCE_EXHAUSTED for out-of-memory, INVALID_ARGUMENT
// for invalid values, handles and pointers, FAILED_PRECONDITION for
// cudaErrorNotReady, UNAVAILABLE for a missing driver or device and sticky
// errors, INTERNAL otherwise.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

}  // namespace gpumux
