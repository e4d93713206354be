// Calls libgpumux_torch_alloc.so as PyTorch's CUDAPluggableAllocator does,
// built against the same torch, and reports how each call ended, for
// test_torch.py: gpumux_torch_malloc of SIZE bytes, COUNT times or until one
// raises (pointers are kept), then one line:
//   ok N                 every allocation succeeded
//   OutOfMemoryError: M  c10::OutOfMemoryError (torch.OutOfMemoryError)
//   Error: M             another c10::Error (RuntimeError)
//   null                 a NULL for a non-zero size (what must never happen)
//   torch_alloc_check GLUE ALLOC_LIBRARY SIZE COUNT

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "c10/util/Exception.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s GLUE ALLOC_LIBRARY SIZE COUNT\n", argv[0]);
    return 2;
  }
  void* glue = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (glue == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  auto bind = reinterpret_cast<int (*)(const char*)>(dlsym(glue, "gpumux_torch_bind"));
  auto bind_error = reinterpret_cast<const char* (*)()>(dlsym(glue, "gpumux_torch_bind_error"));
  auto allocate =
      reinterpret_cast<void* (*)(size_t, int, void*)>(dlsym(glue, "gpumux_torch_malloc"));
  if (bind == nullptr || bind_error == nullptr || allocate == nullptr) {
    std::fprintf(stderr, "libgpumux_torch_alloc.so lacks a function\n");
    return 2;
  }
  if (bind(argv[2]) != 0) {
    std::fprintf(stderr, "%s\n", bind_error());
    return 2;
  }
  const size_t size = std::strtoull(argv[3], nullptr, 10);
  const int count = std::atoi(argv[4]);
  try {
    for (int i = 0; i < count; ++i) {
      if (allocate(size, 0, nullptr) == nullptr) {
        std::printf("null\n");
        return 0;
      }
    }
    std::printf("ok %d\n", count);
  } catch (const c10::OutOfMemoryError& e) {
    std::printf("OutOfMemoryError: %s\n", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    std::printf("Error: %s\n", e.what_without_backtrace());
  }
  return 0;
}
