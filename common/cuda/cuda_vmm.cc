#include "common/cuda/cuda_vmm.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"

namespace gpumux::cuda_vmm {
namespace {

// The driver functions, in the ABI of the version that introduced them
// (CUDA 10.2 for virtual memory management), as the runtime resolves them.
struct Driver {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 export_handle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 import_handle = nullptr;
  absl::Status status;
};

template <typename Fn>
absl::Status Resolve(const char* symbol, Fn* fn) {
  void* found = nullptr;
  cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  // 10020: the ABI of the typedefs above; the driver gives its newest
  // implementation of it.
  const cudaError_t error =
      cudaGetDriverEntryPointByVersion(symbol, &found, 10020, cudaEnableDefault, &result);
#else
  // Toolkits before 12.5 have only the unversioned lookup (the toolkit's ABI).
  const cudaError_t error = cudaGetDriverEntryPoint(symbol, &found, cudaEnableDefault, &result);
#endif
  if (error != cudaSuccess) {
    return CudaStatus(error, absl::StrCat("looking up the driver's ", symbol));
  }
  if (result != cudaDriverEntryPointSuccess || found == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver has no ", symbol, " (virtual memory management needs driver 10.2+)"));
  }
  *fn = reinterpret_cast<Fn>(found);
  return absl::OkStatus();
}

const Driver& Functions() {
  static const Driver* driver = [] {
    auto* d = new Driver();
    d->status = [&]() -> absl::Status {
      GPUMUX_RETURN_IF_ERROR(Resolve("cuDeviceGet", &d->device_get));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuDeviceGetAttribute", &d->device_get_attribute));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemGetAllocationGranularity", &d->granularity));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemAddressReserve", &d->address_reserve));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemAddressFree", &d->address_free));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemCreate", &d->create));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemRelease", &d->release));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemMap", &d->map));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemUnmap", &d->unmap));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemSetAccess", &d->set_access));
      GPUMUX_RETURN_IF_ERROR(Resolve("cuMemExportToShareableHandle", &d->export_handle));
      return Resolve("cuMemImportFromShareableHandle", &d->import_handle);
    }();
    return d;
  }();
  return *driver;
}

// The driver, or why it cannot be used.
absl::StatusOr<const Driver*> Use() {
  const Driver& d = Functions();
  if (!d.status.ok()) return d.status;
  return &d;
}

absl::Status Check(CUresult result, const std::string& what) {
  // CUresult and cudaError_t share their numbering.
  return CudaStatus(static_cast<cudaError_t>(result), what);
}

absl::StatusOr<CUdevice> DriverDevice(const Driver& d, int device) {
  CUdevice handle = 0;
  GPUMUX_RETURN_IF_ERROR(
      Check(d.device_get(&handle, device), absl::StrCat("cuDeviceGet(", device, ")")));
  return handle;
}

CUmemAllocationProp Properties(CUdevice device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

absl::Status CheckSupport(int device) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  GPUMUX_ASSIGN_OR_RETURN(const CUdevice handle, DriverDevice(*d, device));
  for (const auto& [attribute, what] :
       {std::pair{CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                  "virtual memory management (cuMemCreate, cuMemMap)"},
        std::pair{CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                  "memory exported as POSIX file descriptors"}}) {
    int supported = 0;
    GPUMUX_RETURN_IF_ERROR(
        Check(d->device_get_attribute(&supported, attribute, handle), "cuDeviceGetAttribute"));
    if (supported == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA device ", device, " does not support ", what));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Granularity(int device) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  GPUMUX_ASSIGN_OR_RETURN(const CUdevice handle, DriverDevice(*d, device));
  const CUmemAllocationProp prop = Properties(handle);
  size_t granularity = 0;
  GPUMUX_RETURN_IF_ERROR(
      Check(d->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "cuMemGetAllocationGranularity"));
  return granularity;
}

absl::StatusOr<uint64_t> ReserveAddresses(uint64_t size, uint64_t alignment) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  CUdeviceptr address = 0;
  GPUMUX_RETURN_IF_ERROR(Check(d->address_reserve(&address, size, alignment, 0, 0),
                               absl::StrCat("cuMemAddressReserve(", size, ")")));
  return static_cast<uint64_t>(address);
}

absl::Status FreeAddresses(uint64_t address, uint64_t size) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  return Check(d->address_free(address, size), "cuMemAddressFree");
}

absl::StatusOr<PhysicalHandle> Create(int device, uint64_t size) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  GPUMUX_ASSIGN_OR_RETURN(const CUdevice handle, DriverDevice(*d, device));
  const CUmemAllocationProp prop = Properties(handle);
  CUmemGenericAllocationHandle memory = 0;
  GPUMUX_RETURN_IF_ERROR(
      Check(d->create(&memory, size, &prop, 0), absl::StrCat("cuMemCreate(", size, ")")));
  return memory;
}

absl::Status Release(PhysicalHandle handle) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  return Check(d->release(handle), "cuMemRelease");
}

absl::Status Map(uint64_t address, uint64_t size, PhysicalHandle handle,
                 absl::Span<const int> devices) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  std::vector<CUmemAccessDesc> access(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    GPUMUX_ASSIGN_OR_RETURN(access[i].location.id, DriverDevice(*d, devices[i]));
    access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  GPUMUX_RETURN_IF_ERROR(Check(d->map(address, size, 0, handle, 0), "cuMemMap"));
  if (absl::Status granted =
          Check(d->set_access(address, size, access.data(), access.size()), "cuMemSetAccess");
      !granted.ok()) {
    d->unmap(address, size);
    return granted;
  }
  return absl::OkStatus();
}

absl::Status Unmap(uint64_t address, uint64_t size) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  return Check(d->unmap(address, size), "cuMemUnmap");
}

absl::StatusOr<UniqueFd> Export(PhysicalHandle handle) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  int fd = -1;
  GPUMUX_RETURN_IF_ERROR(
      Check(d->export_handle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle"));
  return UniqueFd(fd);
}

absl::StatusOr<PhysicalHandle> Import(int fd) {
  GPUMUX_ASSIGN_OR_RETURN(const Driver* d, Use());
  CUmemGenericAllocationHandle handle = 0;
  GPUMUX_RETURN_IF_ERROR(
      Check(d->import_handle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            "cuMemImportFromShareableHandle"));
  return handle;
}

}  // namespace gpumux::cuda_vmm
