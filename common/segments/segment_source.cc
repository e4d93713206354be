#include "common/segments/segment_source.h"

#include "absl/strings/str_cat.h"

// The expandable-segment calls of a source without expandable segments.

namespace gpumux {
namespace {

absl::Status NoExpandableSegments(DeviceIndex device) {
  return absl::FailedPreconditionError(
      absl::StrCat("device ", device.value(),
                   ": this memory source has no expandable segments (expandable_segments:True)"));
}

}  // namespace

absl::StatusOr<BackendRange> SegmentSource::ReserveRange(DeviceIndex device, uint64_t /*size*/,
                                                         uint64_t /*page_size*/,
                                                         StreamId /*stream*/, bool /*small_pool*/) {
  return NoExpandableSegments(device);
}

absl::Status SegmentSource::MapPages(DeviceIndex device, uint64_t /*address*/, uint64_t /*size*/) {
  return NoExpandableSegments(device);
}

absl::Status SegmentSource::UnmapPages(DeviceIndex device, uint64_t /*address*/,
                                       uint64_t /*size*/) {
  return NoExpandableSegments(device);
}

absl::Status SegmentSource::ReleaseRange(DeviceIndex device, uint64_t /*address*/) {
  return NoExpandableSegments(device);
}

}  // namespace gpumux
