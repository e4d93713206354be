#include "server/rpc/memory_proto.h"

namespace gpumux {
namespace {

v1::HandleKind ToProto(SegmentHandle::Kind kind) {
  switch (kind) {
    case SegmentHandle::Kind::kHostMemfd:
      return v1::HANDLE_KIND_HOST_MEMFD;
    case SegmentHandle::Kind::kCudaIpc:
      return v1::HANDLE_KIND_CUDA_IPC;
    case SegmentHandle::Kind::kHostPages:
      return v1::HANDLE_KIND_HOST_PAGES;
    case SegmentHandle::Kind::kCudaPages:
      return v1::HANDLE_KIND_CUDA_PAGES;
  }
  return v1::HANDLE_KIND_UNSPECIFIED;
}

}  // namespace

void ToProto(const AllocationView& view, v1::Allocation* out) {
  out->set_allocation_id(view.id.value());
  out->set_device(view.device.value());
  out->set_requested_size(view.requested_size);
  out->set_size(view.size);
  out->set_segment_id(view.segment_id.value());
  out->mutable_segment_handle()->set_kind(ToProto(view.segment_handle->kind));
  out->mutable_segment_handle()->set_data(view.segment_handle->data);
  out->mutable_segment_handle()->set_pci_bus_id(view.segment_handle->pci_bus_id);
  out->set_segment_size(view.segment_size);
  out->set_offset(view.offset);
  out->set_address(view.address);
  for (const PageHandle& page : view.pages) {
    v1::PageHandle* p = out->add_pages();
    p->set_offset(page.offset);
    p->set_size(page.size);
    p->set_key(page.key);
  }
}

void ToProto(const DeviceStats& stats, v1::MemoryStats* out) {
  auto* values = out->mutable_values();
  for (auto& [key, value] : FlattenMemoryStats(stats)) (*values)[key] = value;
}

void ToProto(const std::vector<SegmentSnapshot>& segments, v1::MemorySnapshot* out) {
  for (const SegmentSnapshot& s : segments) {
    v1::SnapshotSegment* seg = out->add_segments();
    seg->set_device(s.device.value());
    seg->set_address(s.address);
    seg->set_total_size(s.total_size);
    seg->set_allocated_size(s.allocated_size);
    seg->set_active_size(s.active_size);
    seg->set_requested_size(s.requested_size);
    seg->set_stream(s.stream.value());
    seg->set_segment_type(s.is_small ? "small" : "large");
    seg->set_is_expandable(s.is_expandable);
    seg->set_session_id(s.client.value());
    seg->set_segment_id(s.id.value());
    seg->set_shareable(s.dedicated && !s.leased);
    seg->set_leased(s.leased);
    if (!s.blocks_unavailable.empty()) {
      seg->set_blocks_unavailable(true);
      seg->set_blocks_unavailable_reason(s.blocks_unavailable);
    }
    for (const BlockSnapshot& b : s.blocks) {
      v1::SnapshotBlock* block = seg->add_blocks();
      block->set_address(b.address);
      block->set_size(b.size);
      block->set_requested_size(b.requested_size);
      block->set_state(BlockStateName(b.state));
      block->set_session_id(b.client.value());
    }
  }
}

}  // namespace gpumux
