#include "server/core/segment_subscribers.h"

namespace gpumux {

void SegmentSubscribers::Subscribe(SessionId session, DeviceIndex device, SegmentId segment) {
  absl::MutexLock lock(&mu_);
  Sessions& list = subscribers_[{device.value(), segment.value()}];
  for (SessionId s : list) {
    if (s == session) return;
  }
  list.push_back(session);
}

void SegmentSubscribers::SegmentReleased(DeviceIndex device, SegmentId segment) {
  Sessions list;
  {
    absl::MutexLock lock(&mu_);
    auto it = subscribers_.find({device.value(), segment.value()});
    if (it == subscribers_.end()) return;
    list = std::move(it->second);
    subscribers_.erase(it);
  }
  for (SessionId session : list) sessions_->NotifySegmentReleased(session, device, segment);
}

void SegmentSubscribers::PagesUnmapped(DeviceIndex device, SegmentId segment, uint64_t offset,
                                       uint64_t size) {
  Sessions list;
  {
    absl::MutexLock lock(&mu_);
    auto it = subscribers_.find({device.value(), segment.value()});
    if (it == subscribers_.end()) return;
    list = it->second;  // still subscribed: the segment lives on
  }
  for (SessionId session : list) {
    sessions_->NotifySegmentReleased(session, device, segment, offset, size);
  }
}

}  // namespace gpumux
