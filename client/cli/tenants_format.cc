#include "client/cli/tenants_format.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/text_table.h"
#include "common/base/byte_size.h"
#include "common/formats/json_writer.h"

namespace gpumux {

std::string FormatTenantsJson(const std::vector<TenantInfo>& tenants) {
  JsonWriter json;
  json.BeginArray();
  for (const TenantInfo& tenant : tenants) {
    json.BeginObject();
    json.Key("tenant");
    json.String(tenant.tenant);
    json.Key("devices");
    json.BeginArray();
    for (const TenantDeviceUsage& usage : tenant.devices) {
      json.BeginObject();
      json.Key("device");
      json.Int(usage.device);
      json.Key("limit_bytes");
      json.Uint(usage.limit_bytes);
      json.Key("reserved_bytes");
      json.Uint(usage.reserved_bytes);
      json.Key("allocated_bytes");
      json.Uint(usage.allocated_bytes);
      json.Key("session_ids");
      json.BeginArray();
      for (SessionId session : usage.sessions) json.Uint(session.value());
      json.EndArray();
      json.EndObject();
    }
    json.EndArray();
    json.EndObject();
  }
  json.EndArray();
  return absl::StrCat(json.str(), "\n");
}

std::string FormatTenantsTable(const std::vector<TenantInfo>& tenants) {
  TextTable table({"TENANT", "DEVICE", "LIMIT", "RESERVED", "ALLOCATED", "SESSIONS"});
  for (size_t column : {1, 2, 3, 4}) table.AlignRight(column);
  for (const TenantInfo& tenant : tenants) {
    bool first = true;
    for (const TenantDeviceUsage& usage : tenant.devices) {
      std::vector<std::string> sessions;
      for (SessionId session : usage.sessions) sessions.push_back(absl::StrCat(session.value()));
      table.AddRow({first ? tenant.tenant : std::string(), absl::StrCat(usage.device),
                    usage.limit_bytes == 0 ? "-" : FormatTorchSize(usage.limit_bytes),
                    FormatTorchSize(usage.reserved_bytes), FormatTorchSize(usage.allocated_bytes),
                    sessions.empty() ? "-" : absl::StrJoin(sessions, ",")});
      first = false;
    }
  }
  return table.Render();
}

}  // namespace gpumux
