#include "server/tenant_memory_limit_flag.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/byte_size.h"

namespace gpumux {

absl::StatusOr<std::vector<Daemon::Options::TenantMemoryLimit>> ParseTenantMemoryLimits(
    absl::string_view text) {
  std::vector<Daemon::Options::TenantMemoryLimit> limits;
  if (text.empty()) return limits;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::string quoted = absl::StrCat("'", item, "'");
    const size_t equals = item.rfind('=');
    if (equals == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(quoted, " is not TENANT=SIZE (e.g. pod-a=8GiB)"));
    }
    Daemon::Options::TenantMemoryLimit limit;
    limit.tenant = std::string(item.substr(0, equals));
    if (limit.tenant.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(quoted, ": the tenant is empty"));
    }
    absl::StatusOr<uint64_t> bytes = ParseByteSize(item.substr(equals + 1));
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(quoted, ": ", bytes.status().message()));
    }
    if (*bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(quoted, ": a limit must be positive (leave the tenant out for none)"));
    }
    limit.bytes = *bytes;
    limits.push_back(std::move(limit));
  }
  return limits;
}

}  // namespace gpumux
