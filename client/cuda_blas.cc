#include "client/cuda_blas.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cuda_device.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "gpumux/cuda_interop.h"

namespace gpumux {
namespace {

// What libgpumux uses of cuBLAS, found with dlsym: clients that never ask
// for a handle need not have the library.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
};

absl::StatusOr<Cublas> OpenCublas() {
  std::string tried;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      absl::StrAppend(&tried, tried.empty() ? "" : "; ", dlerror());
      continue;
    }
    Cublas cublas;
    cublas.create = reinterpret_cast<decltype(cublas.create)>(dlsym(library, "cublasCreate_v2"));
    cublas.destroy = reinterpret_cast<decltype(cublas.destroy)>(dlsym(library, "cublasDestroy_v2"));
    cublas.set_stream =
        reinterpret_cast<decltype(cublas.set_stream)>(dlsym(library, "cublasSetStream_v2"));
    cublas.status_name =
        reinterpret_cast<decltype(cublas.status_name)>(dlsym(library, "cublasGetStatusName"));
    if (cublas.create == nullptr || cublas.destroy == nullptr || cublas.set_stream == nullptr ||
        cublas.status_name == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, " lacks cublasCreate_v2, cublasDestroy_v2, ",
                       "cublasSetStream_v2 or cublasGetStatusName"));
    }
    return cublas;  // the library stays loaded for the process's lifetime
  }
  return absl::FailedPreconditionError(
      absl::StrCat("current_blas_handle needs cuBLAS, which cannot be loaded: ", tried));
}

// Loaded once per process.
const absl::StatusOr<Cublas>& LoadedCublas() {
  static const auto* cublas = new absl::StatusOr<Cublas>(OpenCublas());
  return *cublas;
}

absl::Status CublasError(const Cublas& cublas, cublasStatus_t status, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cublas.status_name(status)));
}

// The calling thread's handles by CUDA ordinal, destroyed when it exits.
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (const auto& [device, handle] : handles_) LoadedCublas()->destroy(handle);
  }
  absl::flat_hash_map<int, cublasHandle_t>& handles() { return handles_; }

 private:
  absl::flat_hash_map<int, cublasHandle_t> handles_;
};

thread_local ThreadHandles t_handles;

// cublasCreate_v2 on CUDA device `device`, the thread's current device left
// as it was.
absl::StatusOr<cublasHandle_t> CreateHandle(const Cublas& cublas, int device) {
  CudaDeviceScope scope(device);
  GPUMUX_RETURN_IF_ERROR(CudaStatus(scope.status(), "cudaSetDevice"));
  cublasHandle_t handle = nullptr;
  if (cublasStatus_t created = cublas.create(&handle); created != CUBLAS_STATUS_SUCCESS) {
    return CublasError(cublas, created, "cublasCreate_v2");
  }
  return handle;
}

}  // namespace

absl::StatusOr<void*> CurrentCublasHandle(absl::string_view pci_bus_id) {
  GPUMUX_RETURN_IF_ERROR(LoadedCublas().status());
  const Cublas& cublas = *LoadedCublas();
  GPUMUX_ASSIGN_OR_RETURN(const int device, ResolveCudaDevice(pci_bus_id));
  auto& handles = t_handles.handles();
  auto it = handles.find(device);
  if (it == handles.end()) {
    GPUMUX_ASSIGN_OR_RETURN(cublasHandle_t created, CreateHandle(cublas, device));
    it = handles.emplace(device, created).first;
  }
  const cublasHandle_t handle = it->second;
  if (cublasStatus_t set = cublas.set_stream(handle, CurrentCudaStream());
      set != CUBLAS_STATUS_SUCCESS) {
    return CublasError(cublas, set, "cublasSetStream_v2");
  }
  return static_cast<void*>(handle);
}

}  // namespace gpumux
