#pragma once

// Maps a CUDA-backend segment from its cudaIpcMemHandle_t, or an expandable
// segment's pages from their exported descriptors. Which implementation is
// built is a build-time choice (CMake picks the source file): cuda_client.cc
// where the CUDA toolkit is found, cuda_client_unavailable.cc otherwise.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/mapped_segment.h"

namespace gpumux {

// `handle` is the 64-byte cudaIpcMemHandle_t as the daemon sent it, `size`
// the segment's bytes, `pci_bus_id` its device ("0000:19:00.0"; empty: the
// calling thread's current device). The mapping is opened with
// cudaIpcOpenMemHandle on that device (peer access enabled lazily, so
// kernels on other devices may use it too) and closed with
// cudaIpcCloseMemHandle when destroyed; base() is a device pointer.
// Errors: INVALID_ARGUMENT for a handle that is not 64 bytes, NOT_FOUND for
// a bus id no visible device has, the CUDA error otherwise. UNIMPLEMENTED
// (the caller keeps the allocation, without a pointer) without CUDA support,
// "CUDA IPC mapping needs a CUDA-enabled client build", and when this
// process sees no CUDA device, "no CUDA device is visible to this process".
absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaIpcMapping(absl::string_view handle,
                                                                  uint64_t size,
                                                                  absl::string_view pci_bus_id);

// An expandable segment of the CUDA backend (HANDLE_KIND_CUDA_PAGES):
// `size` bytes of device addresses reserved here (cuMemAddressReserve), into
// which PagedMapping::MapPages maps each page from the descriptor the memory
// socket hands out (cuMemImportFromShareableHandle, cuMemMap, and read-write
// access for the device `pci_bus_id` names); destroyed, it unmaps every page
// and frees the addresses. The errors of OpenCudaIpcMapping, and the
// driver's (FAILED_PRECONDITION for one without virtual memory management).
absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaPagedMapping(uint64_t size,
                                                                    absl::string_view pci_bus_id);

// Whether this process sees a CUDA device (always false without CUDA
// support).
bool CudaDeviceVisible();

}  // namespace gpumux
