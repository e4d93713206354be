#include "client/cli/groups_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/text_table.h"
#include "common/base/byte_size.h"
#include "common/formats/json_writer.h"

namespace gpumux {
namespace {

std::string Members(const DaemonGroupInfo& group) {
  return absl::StrJoin(group.members, ",", [](std::string* out, const DaemonGroupMember& member) {
    absl::StrAppend(out, member.rank, "=", member.address.empty() ? "-" : member.address);
  });
}

}  // namespace

std::string FormatGroupsTable(const std::vector<DaemonGroupInfo>& groups) {
  if (groups.empty()) return "no groups\n";
  TextTable table({"NAME", "TENANT", "SESSION", "RANK", "ROUND", "STATE", "MEMBERS", "COLLECTIVES",
                   "BYTES", "FORMED", "FORM TIME"});
  for (size_t column : {2, 4, 7, 8, 10}) table.AlignRight(column);
  std::string errors;
  for (const DaemonGroupInfo& group : groups) {
    table.AddRow(
        {group.name, group.tenant.empty() ? "-" : group.tenant, absl::StrCat(group.owner.value()),
         absl::StrCat(group.rank, "/", group.world_size), absl::StrCat(group.generation),
         group.state, Members(group), absl::StrCat(group.collectives), FormatTorchSize(group.bytes),
         absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", group.formed_at, absl::UTCTimeZone()),
         absl::StrFormat("%.1f ms", absl::ToDoubleMilliseconds(group.form_time))});
    if (!group.error.empty()) absl::StrAppend(&errors, group.name, ": ", group.error, "\n");
  }
  return table.Render() + errors;
}

std::string FormatGroupsJson(const std::vector<DaemonGroupInfo>& groups) {
  JsonWriter json;
  json.BeginArray();
  for (const DaemonGroupInfo& group : groups) {
    json.BeginObject();
    json.Key("name");
    json.String(group.name);
    json.Key("tenant");
    json.String(group.tenant);
    json.Key("owner_session_id");
    json.Uint(group.owner.value());
    json.Key("world_size");
    json.Int(group.world_size);
    json.Key("rank");
    json.Int(group.rank);
    json.Key("rendezvous_address");
    json.String(group.rendezvous_address);
    json.Key("generation");
    json.Uint(group.generation);
    json.Key("members");
    json.BeginArray();
    for (const DaemonGroupMember& member : group.members) {
      json.BeginObject();
      json.Key("rank");
      json.Int(member.rank);
      json.Key("address");
      json.String(member.address);
      json.EndObject();
    }
    json.EndArray();
    json.Key("timeout_ms");
    json.Int(absl::ToInt64Milliseconds(group.timeout));
    json.Key("state");
    json.String(group.state);
    json.Key("error");
    json.String(group.error);
    json.Key("collectives");
    json.Uint(group.collectives);
    json.Key("bytes");
    json.Uint(group.bytes);
    json.Key("formed_unix_ms");
    json.Int(absl::ToUnixMillis(group.formed_at));
    json.Key("form_ms");
    json.Double(absl::ToDoubleMilliseconds(group.form_time));
    json.Key("device");
    json.Int(group.device.value());
    json.Key("device_communicator");
    json.Bool(group.device_communicator);
    json.EndObject();
  }
  json.EndArray();
  return json.str() + "\n";
}

}  // namespace gpumux
