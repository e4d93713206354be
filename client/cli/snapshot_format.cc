#include "client/cli/snapshot_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/text_table.h"
#include "client/memory_snapshot_json.h"
#include "common/base/byte_size.h"

namespace gpumux {

std::string FormatSnapshotJson(const std::vector<SegmentInfo>& segments) {
  return MemorySnapshotJson(segments);
}

std::string FormatSnapshotTable(const std::vector<SegmentInfo>& segments) {
  TextTable table({"DEVICE", "SEGMENT", "SESSION", "ADDRESS", "TYPE", "TOTAL", "ALLOCATED",
                   "ACTIVE", "REQUESTED", "BLOCKS", "SHAREABLE"});
  for (size_t column : {0, 1, 2, 5, 6, 7, 8, 9}) table.AlignRight(column);
  for (const SegmentInfo& segment : segments) {
    table.AddRow({absl::StrCat(segment.device), absl::StrCat(segment.segment_id.value()),
                  absl::StrCat(segment.session_id.value()),
                  absl::StrFormat("0x%x", segment.address), segment.segment_type,
                  FormatTorchSize(segment.total_size), FormatTorchSize(segment.allocated_size),
                  FormatTorchSize(segment.active_size), FormatTorchSize(segment.requested_size),
                  segment.blocks_unavailable ? std::string("unavailable")
                                             : absl::StrCat(segment.blocks.size()),
                  segment.shareable ? "yes" : "no"});
  }
  std::string out = table.Render();
  // Why, under the table: a stopped or hung client, or a wrong answer.
  for (const SegmentInfo& segment : segments) {
    if (segment.blocks_unavailable) {
      absl::StrAppend(&out, "segment ", segment.segment_id.value(), ": ",
                      segment.blocks_unavailable_reason, "\n");
    }
  }
  return out;
}

}  // namespace gpumux
