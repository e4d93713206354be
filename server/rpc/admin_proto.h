#pragma once

// Conversions between gpumux.v1.Admin messages and the core's tenant books,
// for the Admin service.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/caching_allocator.h"
#include "gpumux/v1/admin.pb.h"

namespace gpumux {

// SetTenantLimitRequest as MemoryManager::SetTenantLimit takes it.
struct TenantLimitChange {
  std::string tenant;
  std::optional<DeviceIndex> device;  // nullopt: every device
  uint64_t limit_bytes = 0;           // 0: unlimited
};

// INVALID_ARGUMENT when the target or the limit is missing, all_devices or
// unlimited is false, or the byte limit is 0 (the tenant name and the device
// range are the core's to check).
absl::StatusOr<TenantLimitChange> FromProto(const v1::SetTenantLimitRequest& request);

// `tenants` sorted by (tenant, device), as MemoryManager::ListTenants gives them.
void ToProto(const std::vector<TenantUsage>& tenants, v1::ListTenantsResponse* out);

}  // namespace gpumux
