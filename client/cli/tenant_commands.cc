// tenants, tenant-limit: tenant memory limits through gpumux.v1.Admin, which
// gpumuxd serves on its admin socket to root and its own user only.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "client/cli/tenants_format.h"
#include "common/base/byte_size.h"
#include "gpumux/admin.h"

namespace gpumux {

int RunTenants(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {{"json"}});
  absl::Status status = parsed.status();
  if (status.ok() && !parsed->positional.empty()) {
    status = absl::InvalidArgumentError("unexpected argument " + parsed->positional.front());
  }
  if (!status.ok()) return UsageError(context, status.message(), kTenantsUsage);
  absl::StatusOr<std::vector<TenantInfo>> tenants = Admin(context.address).ListTenants();
  if (!tenants.ok()) return ReportError(context, tenants.status());
  *context.out << (parsed->Has("json") ? FormatTenantsJson(*tenants)
                                       : FormatTenantsTable(*tenants));
  return kExitOk;
}

int RunTenantLimit(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {{"device", true}});
  absl::Status status = parsed.status();
  if (status.ok() && parsed->positional.size() != 2) {
    status = absl::InvalidArgumentError(
        parsed->positional.size() < 2
            ? "tenant-limit wants a TENANT and a SIZE (or none)"
            : absl::StrCat("unexpected argument ", parsed->positional[2]));
  }
  absl::StatusOr<int64_t> device = 0;
  std::optional<uint64_t> limit;
  if (status.ok()) {
    device = IntFlag(*parsed, "device", 0, 0, std::numeric_limits<int32_t>::max());
    status = device.status();
  }
  if (status.ok() && absl::AsciiStrToLower(parsed->positional[1]) != "none") {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(parsed->positional[1]);
    if (!bytes.ok()) {
      status = absl::InvalidArgumentError(absl::StrCat("SIZE: ", bytes.status().message()));
    } else if (*bytes == 0) {
      status = absl::InvalidArgumentError("SIZE must be positive; none removes the limit");
    } else {
      limit = *bytes;
    }
  }
  if (!status.ok()) return UsageError(context, status.message(), kTenantLimitUsage);
  const std::string& tenant = parsed->positional[0];
  std::optional<DeviceIndex> on;
  if (parsed->Has("device")) on = DeviceIndex(static_cast<int32_t>(*device));
  status = Admin(context.address).SetTenantLimit(tenant, limit, on);
  if (!status.ok()) return ReportError(context, status);
  *context.out << "tenant '" << tenant << "': "
               << (limit.has_value()
                       ? absl::StrCat("limit ", *limit, " bytes (", FormatTorchSize(*limit), ")")
                       : std::string("no limit"))
               << (on.has_value() ? absl::StrCat(" on GPU ", on->value()) : " on every device")
               << "\n";
  return kExitOk;
}

}  // namespace gpumux
