#pragma once

// CUDA runtime errors as absl::Status, the one translation for the daemon's
// CUDA backend and the client library (STYLE: foreign errors are translated
// once, at the edge). It also resets the thread's last error, so a failure
// handled here never surfaces again in a later call or kernel launch, and
// says which errors are sticky: those that leave the device's context
// unusable until the process restarts. Built only with CUDA.

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// OK for cudaSuccess. Otherwise resets the last error (cudaGetLastError) and
// returns "<what>: <cudaGetErrorName> (<cudaGetErrorString>)" with a code by
// kind: RESOURCE_EXHAUSTED for out-of-memory, INVALID_ARGUMENT for invalid
// values, devices, handles and pointers, FAILED_PRECONDITION for
// cudaErrorNotReady, UNAVAILABLE for a missing driver or device and sticky
// errors, INTERNAL otherwise.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// For results of cudaStreamQuery / cudaEventQuery: true for
// cudaErrorNotReady, which it also resets (otherwise the next kernel
// launch's cudaGetLastError reports it).
bool CudaNotReady(cudaError_t error);

// Resets the last error after a failure the caller handles without
// reporting it (a retry after cudaErrorMemoryAllocation, a probe allowed to
// fail).
void ResetCudaError();

// True for errors after which every later call on the context fails the same
// way (cudaErrorIllegalAddress, cudaErrorLaunchFailure, an uncorrectable ECC
// error, ...): the device must be reported unhealthy.
bool IsStickyCudaError(cudaError_t error);

}  // namespace gpumux
