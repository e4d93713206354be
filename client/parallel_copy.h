#pragma once

// ParallelMemcpy: memcpy of large buffers by several threads at once. One
// core's memcpy moves 10-20 GB/s; a GPU's pinned DMA takes 55 GB/s, so staged
// copies (the caller's bytes into the staging buffer, or out of it) would be
// bound by a single thread. Copies from 4 MiB up are split over up to half
// the cores (at least 2, at most 8 threads); smaller ones are plain memcpy.

#include <cstddef>

namespace gpumux {

// Same contract as std::memcpy. Thread-safe; its helper threads are shared
// by the process and start on first use.
void ParallelMemcpy(void* dst, const void* src, size_t bytes);

}  // namespace gpumux
