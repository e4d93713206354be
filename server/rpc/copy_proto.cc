#include "server/rpc/copy_proto.h"

namespace gpumux {

WorkOptions FromProto(const v1::CopyOptions& options) {
  return WorkOptions{StreamId(options.stream()), options.wait(), options.completion_event()};
}

RangeUse FromProto(const v1::DeviceRange& range, uint64_t size) {
  return RangeUse{AllocationId(range.allocation_id()), range.offset(), size};
}

void ToProto(const StagingBufferInfo& info, v1::StagingBuffer* out) {
  out->mutable_handle()->set_kind(v1::HANDLE_KIND_HOST_MEMFD);
  out->mutable_handle()->set_data(info.key);
  out->set_size(info.size);
  out->set_pinned(info.pinned);
}

}  // namespace gpumux
