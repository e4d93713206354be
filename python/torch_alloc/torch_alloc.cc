// libgpumux_torch_alloc.so: gpumux's allocator as PyTorch's
// CUDAPluggableAllocator calls it, in PyTorch's terms. PyTorch checks no
// result of the allocation function it is given (a NULL for a non-zero size
// becomes a tensor whose first kernel faults, and the CUDA context is lost)
// and takes errors as C++ exceptions. So gpumux_torch_malloc raises
// c10::OutOfMemoryError for an allocation the daemon or the session's limit
// refused (torch.OutOfMemoryError in Python, with PyTorch's "CUDA out of
// memory" text) and c10::Error for any other failure, an unreachable daemon
// included (RuntimeError). gpumux_torch_free never throws: PyTorch frees
// from destructors.
//
// Built against the PyTorch it serves (its C++ ABI), it calls the C ABI of
// gpumux/alloc.h in whichever library of the process carries it,
// libgpumux_alloc.so or the gpumux._C module (loading both would register
// gpumux's protobuf descriptors twice): gpumux_torch_bind names it before
// the first allocation.

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "c10/util/Exception.h"

namespace {

// RESOURCE_EXHAUSTED in Abseil's numbering, which gpumux_last_error_code uses.
constexpr int kResourceExhausted = 8;

struct AllocAbi {
  void* (*malloc)(size_t, int, void*) = nullptr;
  void (*free)(void*, size_t, int, void*) = nullptr;
  const char* (*last_error)() = nullptr;
  int (*last_error_code)() = nullptr;
};

// Written once by gpumux_torch_bind; the release store publishes the
// pointers to the allocating threads' acquire loads.
AllocAbi abi;
std::atomic<bool> bound{false};
thread_local std::string bind_error;

template <typename T>
bool Find(void* library, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(library, name));
  if (*out != nullptr) return true;
  bind_error = std::string("gpumux_torch_bind: ") + name + " not found: " + dlerror();
  return false;
}

}  // namespace

extern "C" {

// Binds to the C ABI in the shared object `library` (loaded already, or
// loaded now). 0 on success; -1, with gpumux_torch_bind_error() saying why,
// when it cannot be loaded or lacks a function. Binding twice keeps the
// first library.
__attribute__((visibility("default"))) int gpumux_torch_bind(const char* library) {
  if (bound.load(std::memory_order_acquire)) return 0;
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    bind_error = std::string("gpumux_torch_bind: ") + dlerror();
    return -1;
  }
  AllocAbi found;
  if (!Find(handle, "gpumux_malloc", &found.malloc) || !Find(handle, "gpumux_free", &found.free) ||
      !Find(handle, "gpumux_last_error", &found.last_error) ||
      !Find(handle, "gpumux_last_error_code", &found.last_error_code)) {
    return -1;
  }
  abi = found;
  bound.store(true, std::memory_order_release);
  return 0;
}

__attribute__((visibility("default"))) const char* gpumux_torch_bind_error() {
  return bind_error.c_str();
}

// PyTorch's alloc (CUDAPluggableAllocator): gpumux_malloc, raising instead
// of returning NULL.
__attribute__((visibility("default"))) void* gpumux_torch_malloc(size_t size, int device,
                                                                 void* stream) {
  TORCH_CHECK(bound.load(std::memory_order_acquire),
              "gpumux: the allocator is not bound to gpumux's C ABI (gpumux_torch_bind)");
  void* memory = abi.malloc(size, device, stream);
  if (memory != nullptr || size == 0) return memory;
  const std::string message = abi.last_error();
  TORCH_CHECK_WITH(OutOfMemoryError, abi.last_error_code() != kResourceExhausted, message);
  TORCH_CHECK(false, "gpumux: ", message);
}

// PyTorch's free: gpumux_free. A pointer gpumux does not know is left alone
// with gpumux_free's last error set: throwing here would end the process.
__attribute__((visibility("default"))) void gpumux_torch_free(void* ptr, size_t size, int device,
                                                              void* stream) {
  if (bound.load(std::memory_order_acquire)) abi.free(ptr, size, device, stream);
}

}  // extern "C"
