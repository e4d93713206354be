// libgpumux without CUDA: CUDA IPC handles cannot be mapped (allocations on
// a CUDA daemon are still usable through the daemon: copies, fills) and frees
// need no fence.

#include "client/cuda_blas.h"
#include "client/cuda_free_fence.h"
#include "client/cuda_ipc_mapping.h"
#include "client/cuda_local_streams.h"
#include "client/cuda_own_work.h"
#include "client/local_event.h"

namespace gpumux {

absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaIpcMapping(
    absl::string_view /*handle*/, uint64_t /*size*/, absl::string_view /*pci_bus_id*/) {
  return absl::UnimplementedError("CUDA IPC mapping needs a CUDA-enabled client build");
}

absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaPagedMapping(
    uint64_t /*size*/, absl::string_view /*pci_bus_id*/) {
  return absl::UnimplementedError("mapping CUDA pages needs a CUDA-enabled client build");
}

bool CudaDeviceVisible() { return false; }

std::string RecordFreeFence(int /*cuda_device*/) { return ""; }

void WaitForFreeFences() {}

absl::Status SynchronizeOwnCudaWork(absl::string_view /*pci_bus_id*/) { return absl::OkStatus(); }

absl::StatusOr<void*> CurrentCublasHandle(absl::string_view /*pci_bus_id*/) {
  return absl::FailedPreconditionError("current_blas_handle needs a CUDA-enabled client build");
}

std::unique_ptr<LocalEvent> OpenCudaLocalEvent(absl::string_view /*handle*/) { return nullptr; }

std::unique_ptr<LocalStreams> MakeCudaLocalStreams(
    std::function<absl::StatusOr<std::string>(DeviceIndex)> /*pci_bus_id*/) {
  return nullptr;
}

LocalStream CurrentCudaLocalStream() { return LocalStream(0); }

}  // namespace gpumux
