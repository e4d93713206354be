#include "client/cli/sessions_format.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/text_table.h"
#include "common/base/byte_size.h"
#include "common/formats/json_writer.h"

namespace gpumux {
namespace {

void WriteUsage(const SessionDeviceUsage& usage, JsonWriter& json) {
  json.BeginObject();
  json.Key("device");
  json.Int(usage.device);
  json.Key("allocated_bytes");
  json.Uint(usage.allocated_bytes);
  json.Key("reserved_bytes");
  json.Uint(usage.reserved_bytes);
  json.Key("allocations");
  json.Uint(usage.allocations);
  json.Key("imported_bytes");
  json.Uint(usage.imported_bytes);
  json.Key("memory_limit_bytes");
  json.Uint(usage.memory_limit_bytes);
  json.EndObject();
}

}  // namespace

std::string FormatSessionsJson(const std::vector<SessionInfo>& sessions) {
  JsonWriter json;
  json.BeginArray();
  for (const SessionInfo& session : sessions) {
    json.BeginObject();
    json.Key("session_id");
    json.Uint(session.session_id.value());
    json.Key("client_name");
    json.String(session.client_name);
    json.Key("pid");
    json.Int(session.pid);
    json.Key("tenant");
    json.String(session.tenant);
    json.Key("labels");
    json.BeginObject();
    for (const auto& [key, value] : session.labels) {
      json.Key(key);
      json.String(value);
    }
    json.EndObject();
    json.Key("opened_unix_micros");
    json.Int(session.opened_unix_micros);
    json.Key("streams");
    json.Uint(session.streams);
    json.Key("events");
    json.Uint(session.events);
    json.Key("stats_page");
    json.Bool(session.stats_page);
    json.Key("stats_page_rejected");
    json.Bool(session.stats_page_rejected);
    json.Key("devices");
    json.BeginArray();
    for (const SessionDeviceUsage& usage : session.devices) WriteUsage(usage, json);
    json.EndArray();
    json.EndObject();
  }
  json.EndArray();
  return absl::StrCat(json.str(), "\n");
}

std::string FormatSessionsTable(const std::vector<SessionInfo>& sessions) {
  TextTable table({"ID", "PID", "NAME", "TENANT", "LABELS", "STREAMS", "EVENTS", "DEVICE",
                   "ALLOCATED", "RESERVED", "ALLOCATIONS", "LIMIT"});
  for (size_t column : {0, 1, 5, 6, 7, 8, 9, 10, 11}) table.AlignRight(column);
  for (const SessionInfo& session : sessions) {
    std::vector<std::string> head = {
        absl::StrCat(session.session_id.value()),
        absl::StrCat(session.pid),
        session.stats_page_rejected ? absl::StrCat(session.client_name, " (stats page rejected)")
                                    : session.client_name,
        session.tenant.empty() ? "-" : session.tenant,
        session.labels.empty() ? "-" : absl::StrJoin(session.labels, ",", absl::PairFormatter("=")),
        absl::StrCat(session.streams),
        absl::StrCat(session.events)};
    if (session.devices.empty()) {
      head.insert(head.end(), {"-", "-", "-", "-", "-"});
      table.AddRow(std::move(head));
      continue;
    }
    bool first = true;
    for (const SessionDeviceUsage& usage : session.devices) {
      std::vector<std::string> row =
          first ? head : std::vector<std::string>(head.size(), std::string());
      first = false;
      row.insert(row.end(),
                 {absl::StrCat(usage.device), FormatTorchSize(usage.allocated_bytes),
                  FormatTorchSize(usage.reserved_bytes), absl::StrCat(usage.allocations),
                  usage.memory_limit_bytes == 0 ? "-" : FormatTorchSize(usage.memory_limit_bytes)});
      table.AddRow(std::move(row));
    }
  }
  return table.Render();
}

}  // namespace gpumux
