#include "common/cuda/cuda_status.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumux {

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

void ResetCudaError() { static_cast<void>(cudaGetLastError()); }

bool CudaNotReady(cudaError_t error) {
  if (error != cudaErrorNotReady) return false;
  ResetCudaError();
  return true;
}

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // A sticky error stays whatever this does; any other must not surface in
  // a later call.
  ResetCudaError();
  std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(std::move(message));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorMapBufferObjectFailed:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
      return absl::InvalidArgumentError(std::move(message));
    case cudaErrorNotReady:
      return absl::FailedPreconditionError(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(std::move(message));
    default:
      if (IsStickyCudaError(error)) return absl::UnavailableError(std::move(message));
      return absl::InternalError(std::move(message));
  }
}

}  // namespace gpumux
