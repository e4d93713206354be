#pragma once

// SegmentSubscribers: which sessions were handed a handle of which segment,
// so that each is told to unmap it (a SegmentReleased notice) when the
// allocator releases the segment, or to unmap pages of it when an expandable
// segment gives them back. Thread-safe: its own mutex, taken last (after
// MemoryManager's and the allocator's) and never held while notices go out.

#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/common/ids.h"
#include "server/core/session_registry.h"

namespace gpumux {

class SegmentSubscribers {
 public:
  // `sessions` delivers the notices (skipping sessions closed by then); it
  // must outlive this.
  explicit SegmentSubscribers(const SessionRegistry* sessions) : sessions_(sessions) {}

  // `session` was handed `segment` of `device`; being handed it again
  // changes nothing. A subscription lasts until the segment is released,
  // whether the session still lives or not.
  void Subscribe(SessionId session, DeviceIndex device, SegmentId segment);
  // The segment went back to the backend: tells each subscriber once, and
  // forgets them.
  void SegmentReleased(DeviceIndex device, SegmentId segment);
  // Bytes [offset, offset + size) of an expandable segment were unmapped:
  // tells each subscriber, who stay subscribed to the rest.
  void PagesUnmapped(DeviceIndex device, SegmentId segment, uint64_t offset, uint64_t size);

 private:
  using Sessions = absl::InlinedVector<SessionId, 2>;

  const SessionRegistry* const sessions_;
  absl::Mutex mu_;
  // By (device, segment).
  absl::flat_hash_map<std::pair<int32_t, uint64_t>, Sessions> subscribers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
