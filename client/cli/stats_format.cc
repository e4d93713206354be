#include "client/cli/stats_format.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/formats/json_writer.h"
#include "common/formats/memory_stats.h"

namespace gpumux {
namespace {

int64_t ValueOf(const std::map<std::string, int64_t>& stats, const std::string& key) {
  auto it = stats.find(key);
  return it == stats.end() ? 0 : it->second;
}

}  // namespace

std::string FormatStatsJson(const std::map<std::string, int64_t>& stats) {
  JsonWriter json;
  json.BeginObject();
  for (const std::string& key : MemoryStatsKeys()) {
    json.Key(key);
    json.Int(ValueOf(stats, key));
  }
  json.EndObject();
  return absl::StrCat(json.str(), "\n");
}

std::string FormatStatsLines(const std::map<std::string, int64_t>& stats) {
  size_t width = 0;
  for (const std::string& key : MemoryStatsKeys()) width = std::max(width, key.size());
  std::string out;
  for (const std::string& key : MemoryStatsKeys()) {
    absl::StrAppend(&out, key, std::string(width - key.size() + 2, ' '), ValueOf(stats, key), "\n");
  }
  return out;
}

}  // namespace gpumux
