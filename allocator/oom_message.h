#pragma once

// The out-of-memory text PyTorch's DeviceCachingAllocator::malloc throws
// (c10/cuda/CUDACachingAllocator.cpp, 2.3-2.11 wording), followed by the
// figures of the gpumux session that asked and, when its tenant has a limit,
// the tenant's.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gpumux {

struct OomReport {
  int device = 0;
  uint64_t attempted_segment_size = 0;  // get_allocation_size, not the request
  uint64_t device_total = 0;
  // What the backend said is free, or why it could not say.
  absl::StatusOr<uint64_t> device_free = uint64_t{0};
  uint64_t device_allocated = 0;  // allocated_bytes.all.current, whole device
  uint64_t device_reserved = 0;   // reserved_bytes.all.current, whole device
  uint64_t client_allocated = 0;
  uint64_t client_reserved = 0;
  uint64_t client_limit = 0;  // 0 = none
  // The client's tenant, when it has a limit (empty otherwise).
  std::string tenant;
  uint64_t tenant_limit = 0;
  uint64_t tenant_reserved = 0;  // by all its clients on the device
  size_t tenant_clients = 0;
};

// "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total
// capacity of ... This session has X allocated and Y reserved on GPU 0."
// With a tenant: "... Its tenant 'T' has Z reserved on GPU 0 over N
// sessions, of its L limit ..."
std::string FormatOomMessage(const OomReport& report);

}  // namespace gpumux
