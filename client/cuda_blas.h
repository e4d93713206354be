#pragma once

// The cuBLAS handles behind Client::CurrentBlasHandle. Built from
// cuda_blas.cc (CUDA builds) or cuda_client_unavailable.cc.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// The calling thread's cuBLAS handle (a cublasHandle_t) for the CUDA device
// with `pci_bus_id` in this process, created on first use and bound to the
// thread's current CUDA stream (CurrentCudaStream) on every call. cuBLAS is
// loaded with dlopen on the first call. FAILED_PRECONDITION when it cannot be
// loaded or this build has no CUDA; NOT_FOUND when no visible device has the
// bus id; the CUDA or cuBLAS error otherwise.
absl::StatusOr<void*> CurrentCublasHandle(absl::string_view pci_bus_id);

}  // namespace gpumux
