#pragma once

// `gpumux tenants` output: one table row per tenant and device (the tenant's
// name only on its first row; "-" for no limit), sessions as their ids; JSON
// is a list of TenantInfo objects with per-device usage as a list.

#include <string>
#include <vector>

#include "gpumux/tenant_info.h"

namespace gpumux {

std::string FormatTenantsJson(const std::vector<TenantInfo>& tenants);
std::string FormatTenantsTable(const std::vector<TenantInfo>& tenants);

}  // namespace gpumux
