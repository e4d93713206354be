#include "client/memory_snapshot_json.h"

#include "absl/strings/str_cat.h"
#include "common/formats/json_writer.h"

namespace gpumux {
namespace {

void WriteBlock(const BlockInfo& block, JsonWriter& json) {
  json.BeginObject();
  json.Key("address");
  json.Uint(block.address);
  json.Key("size");
  json.Uint(block.size);
  json.Key("requested_size");
  json.Uint(block.requested_size);
  json.Key("state");
  json.String(block.state);
  json.Key("frames");
  json.BeginArray();
  json.EndArray();
  json.EndObject();
}

void WriteSegment(const SegmentInfo& segment, JsonWriter& json) {
  json.BeginObject();
  json.Key("device");
  json.Int(segment.device);
  json.Key("address");
  json.Uint(segment.address);
  json.Key("total_size");
  json.Uint(segment.total_size);
  json.Key("allocated_size");
  json.Uint(segment.allocated_size);
  json.Key("active_size");
  json.Uint(segment.active_size);
  json.Key("requested_size");
  json.Uint(segment.requested_size);
  json.Key("stream");
  json.Uint(segment.stream);
  json.Key("segment_type");
  json.String(segment.segment_type);
  json.Key("segment_pool_id");
  json.BeginArray();
  json.Int(0);
  json.Int(0);
  json.EndArray();
  json.Key("is_expandable");
  json.Bool(segment.is_expandable);
  json.Key("frames");
  json.BeginArray();
  json.EndArray();
  json.Key("blocks");
  json.BeginArray();
  for (const BlockInfo& block : segment.blocks) WriteBlock(block, json);
  json.EndArray();
  json.Key("session_id");
  json.Uint(segment.session_id.value());
  json.Key("segment_id");
  json.Uint(segment.segment_id.value());
  json.Key("shareable");
  json.Bool(segment.shareable);
  json.Key("leased");
  json.Bool(segment.leased);
  if (segment.blocks_unavailable) {
    json.Key("blocks_unavailable");
    json.String(segment.blocks_unavailable_reason);
  }
  json.EndObject();
}

}  // namespace

std::string MemorySnapshotJson(const std::vector<SegmentInfo>& segments) {
  JsonWriter json;
  json.BeginArray();
  for (const SegmentInfo& segment : segments) WriteSegment(segment, json);
  json.EndArray();
  return absl::StrCat(json.str(), "\n");
}

}  // namespace gpumux
