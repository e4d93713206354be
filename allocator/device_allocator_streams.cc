#include "allocator/device_allocator.h"

// Reuse across streams: recordStream, and the pending frees that wait on
// other streams' work (PyTorch's process_events and
// synchronize_and_free_events; insert_events is in Free), or stop waiting on
// a removed client's events.

namespace gpumux {

void DeviceAllocator::RecordStream(uint64_t address, StreamId stream, BackendStream backend_stream,
                                   bool even_allocation_stream) {
  absl::MutexLock lock(&mu_);
  Block* block = AllocatedBlockOrDie(address);
  // Work on the allocation stream is ordered before any reuse, which happens
  // on that stream too.
  if (stream == block->stream && !even_allocation_stream) return;
  const StreamUse use{stream, backend_stream};
  for (const StreamUse& u : block->stream_uses) {
    if (u == use) return;
  }
  block->stream_uses.push_back(use);
  events_.AddStreamUse(backend_stream);
}

void DeviceAllocator::RetireStream(BackendStream backend_stream) {
  absl::MutexLock lock(&mu_);
  events_.RetireStream(backend_stream);
}

void DeviceAllocator::ProcessEventsLocked(ReleasedSegments* released) {
  // The callbacks run under mu_, inside this call; the analysis cannot see it.
  events_.Poll([&](Block* block)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS { FreeBlockLocked(block, released); });
}

void DeviceAllocator::SynchronizeAndFreeEventsLocked(absl::FunctionRef<bool(const Block*)> wanted,
                                                     ReleasedSegments* released) {
  if (events_.empty()) return;
  events_.Synchronize(wanted, [&](Block* block) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    FreeBlockLocked(block, released);
  });
}

size_t DeviceAllocator::AbandonCallerEventsLocked(absl::FunctionRef<bool(const Block*)> wanted,
                                                  ReleasedSegments* released) {
  if (events_.empty()) return 0;
  return events_.AbandonForeign(wanted, [&](Block* block) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    FreeBlockLocked(block, released);
  });
}

}  // namespace gpumux
