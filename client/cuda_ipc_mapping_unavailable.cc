#include "client/cuda_ipc_mapping.h"

namespace gpumux {

absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaIpcMapping(absl::string_view /*handle*/,
                                                                  uint64_t /*size*/) {
  return absl::UnimplementedError("CUDA IPC mapping needs a CUDA-enabled client build");
}

}  // namespace gpumux
