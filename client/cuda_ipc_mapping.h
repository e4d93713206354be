#pragma once

// Maps a CUDA-backend segment from its cudaIpcMemHandle_t. Which
// implementation is built is a build-time choice (CMake picks the source
// file): cuda_ipc_mapping_unavailable.cc in this build; a CUDA-enabled client
// build adds one that calls cudaIpcOpenMemHandle.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/mapped_segment.h"

namespace gpumux {

// `handle` is the 64-byte cudaIpcMemHandle_t as the daemon sent it. Without
// CUDA support: UNIMPLEMENTED "CUDA IPC mapping needs a CUDA-enabled client
// build".
absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaIpcMapping(absl::string_view handle,
                                                                  uint64_t size);

}  // namespace gpumux
