#pragma once

// What the daemon reports about a tenant (gpumux tenants, Admin::
// ListTenants) as plain structs.

#include <cstdint>
#include <string>
#include <vector>

#include "gpumux/common/ids.h"

namespace gpumux {

// A tenant's books on one device.
struct TenantDeviceUsage {
  int32_t device = 0;
  // The cap on reserved_bytes; 0 when unlimited.
  uint64_t limit_bytes = 0;
  // Bytes of the segments reserved for the tenant's sessions together.
  uint64_t reserved_bytes = 0;
  // Bytes of blocks charged to its sessions.
  uint64_t allocated_bytes = 0;
  // Its open sessions, by id.
  std::vector<SessionId> sessions;
};

struct TenantInfo {
  std::string tenant;
  std::vector<TenantDeviceUsage> devices;  // by device
};

}  // namespace gpumux
