#pragma once

// gpumuxd --tenant-memory-limit=TENANT=SIZE[,TENANT=SIZE...]: byte limits on
// all sessions of a tenant together, on every device. SIZE is what
// ParseByteSize reads (as --host-device-memory: "8GiB", "512MB"); a tenant
// may hold '=' (the last one separates the size) but not ',' (the flag's
// separator: such a tenant's limit is set through gpumux.v1.Admin).

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/daemon.h"

namespace gpumux {

// The limits `text` lists, in order; "" lists none. INVALID_ARGUMENT saying
// which item is wrong for an empty item, one without "=SIZE", an empty
// tenant, a size that does not parse, or a size of 0. (Tenant names are
// checked further when the daemon starts.)
absl::StatusOr<std::vector<Daemon::Options::TenantMemoryLimit>> ParseTenantMemoryLimits(
    absl::string_view text);

}  // namespace gpumux
