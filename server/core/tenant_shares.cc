#include "server/core/tenant_shares.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpumux {

std::string TenantLabel(absl::string_view tenant) {
  if (tenant.empty()) return "the sessions without a tenant";
  return absl::StrCat("tenant '", tenant, "'");
}

absl::Status TenantShares::Take(absl::string_view tenant, size_t daemon_limit, size_t count) {
  const size_t share = ShareOf(daemon_limit);
  size_t held = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(tenant);
    held = it == held_.end() ? 0 : it->second;
    if (held + count <= share) {
      if (it == held_.end()) it = held_.emplace(std::string(tenant), 0).first;
      it->second += count;
      return absl::OkStatus();
    }
  }
  const bool unnamed = tenant.empty();
  return refusal_.Refuse(absl::StrCat(
      TenantLabel(tenant), unnamed ? " hold " : " holds ", held, " ", what_,
      ", a tenant's share (a quarter of the daemon's ", daemon_limit, "); release some first",
      unnamed ? ", or open sessions with a tenant of their own" : ""));
}

void TenantShares::Give(absl::string_view tenant, size_t count) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(tenant);
  if (it == held_.end()) return;
  it->second -= std::min(count, it->second);
  if (it->second == 0) held_.erase(it);
}

}  // namespace gpumux
