#pragma once

// Conversions between gpumux.v1.Admin messages and the core's tenant books
// and session kills, for the Admin service.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/caching_allocator.h"
#include "gpumux/common/ids.h"
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

// KillSessionRequest as SessionLifecycle::Kill takes it.
struct SessionKill {
  SessionId session;
  std::string reason;
};

// A kill's reason is printed in the killed client's error and the daemon's log.
inline constexpr size_t kMaxKillReasonBytes = 1024;

// INVALID_ARGUMENT for session_id 0, or a reason over kMaxKillReasonBytes or
// holding a control character (C0, DEL or C1), naming the byte.
absl::StatusOr<SessionKill> FromProto(const v1::KillSessionRequest& request);

// `tenants` sorted by (tenant, device), as MemoryManager::ListTenants gives them.
void ToProto(const std::vector<TenantUsage>& tenants, v1::ListTenantsResponse* out);

}  // namespace gpumux
