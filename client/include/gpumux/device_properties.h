#pragma once

// torch.cuda.get_device_properties(device) as a plain struct: what the
// daemon reports about one of its devices (v1::DeviceProperties).

#include <cstdint>
#include <string>
#include <vector>

namespace gpumux {

struct DeviceProperties {
  int32_t index = 0;
  std::string name;
  // "host" or "cuda".
  std::string backend;
  uint64_t total_memory = 0;
  // Bytes the backend can still hand out (cudaMemGetInfo's free).
  uint64_t free_memory = 0;
  // Compute capability; the host backend reports 0.0.
  int32_t major = 0;
  int32_t minor = 0;
  // Streaming multiprocessors; the host backend reports its worker threads.
  int32_t multi_processor_count = 0;
  // "0000:19:00.0"; empty on the host backend.
  std::string pci_bus_id;
  // torch.cuda.get_arch_list() / get_gencode_flags() of the daemon's build.
  std::vector<std::string> arch_list;
  std::string gencode_flags;
  // cudaDriverGetVersion / cudaRuntimeGetVersion; 0 on the host backend.
  int32_t driver_version = 0;
  int32_t runtime_version = 0;
  // What collectives across devices run on: "nccl 2.28.9" or "copies".
  std::string collectives;
  // False after a sticky CUDA error; `health` says why ("ok" otherwise).
  bool healthy = true;
  std::string health;
};

}  // namespace gpumux
