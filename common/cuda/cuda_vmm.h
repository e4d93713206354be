#pragma once

// CUDA's virtual memory management (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, POSIX file descriptor export and import), for
// expandable segments on the CUDA backend and for the clients that map their
// pages. The driver API is resolved at run time through the runtime's
// cudaGetDriverEntryPointByVersion (cudaGetDriverEntryPoint before CUDA
// 12.5): nothing links libcuda, so a process without a driver still starts
// (gpumuxd then runs the host backend). Driver results are translated by
// CudaStatus (common/cuda/cuda_status.h): the driver's CUresult and the runtime's
// cudaError_t number their errors alike. Built only with CUDA. Thread-safe.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux::cuda_vmm {

// A physical allocation (CUmemGenericAllocationHandle).
using PhysicalHandle = unsigned long long;

// OK when `device` (a runtime ordinal) can create memory with cuMemCreate and
// export it as a POSIX file descriptor; otherwise FAILED_PRECONDITION saying
// what is missing (an old driver, a device without virtual memory
// management or without descriptor export), or the driver's error.
absl::Status CheckSupport(int device);

// cuMemGetAllocationGranularity's minimum for exportable memory on `device`
// (2 MiB on every GPU so far).
absl::StatusOr<uint64_t> Granularity(int device);

// Reserves `size` bytes of device addresses aligned to `alignment`
// (cuMemAddressReserve); frees them (cuMemAddressFree, every mapping in them
// unmapped first).
absl::StatusOr<uint64_t> ReserveAddresses(uint64_t size, uint64_t alignment);
absl::Status FreeAddresses(uint64_t address, uint64_t size);

// `size` bytes of memory on `device` exportable as a POSIX descriptor
// (cuMemCreate): RESOURCE_EXHAUSTED when the device is full. Released by
// Release; memory still mapped somewhere lives until unmapped there.
absl::StatusOr<PhysicalHandle> Create(int device, uint64_t size);
absl::Status Release(PhysicalHandle handle);

// Maps all of `handle` at `address` (cuMemMap) and gives `devices` read-write
// access to it (cuMemSetAccess); on failure nothing stays mapped.
absl::Status Map(uint64_t address, uint64_t size, PhysicalHandle handle,
                 absl::Span<const int> devices);
// Unmaps exactly one earlier Map (cuMemUnmap).
absl::Status Unmap(uint64_t address, uint64_t size);

// A new descriptor for `handle` (cuMemExportToShareableHandle), which
// another process turns back into a handle with Import.
absl::StatusOr<UniqueFd> Export(PhysicalHandle handle);
// cuMemImportFromShareableHandle; the descriptor may be closed after.
absl::StatusOr<PhysicalHandle> Import(int fd);

}  // namespace gpumux::cuda_vmm
