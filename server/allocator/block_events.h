#pragma once

// BlockEvents: the events one device's freed blocks wait on before they may be
// reused, i.e. PyTorch's cuda_events (a FIFO of (event, block) per stream),
// its EventPool, and insert_events / process_events /
// synchronize_and_free_events. A block freed after recordStream gets one
// pooled event recorded on each stream that used it; a block freed with
// caller-supplied events (`wait_for`, e.g. an interprocess event a client
// recorded on its own stream) also waits on those, and BlockEvents owns and
// destroys them once they complete. Each block whose last event completes is
// handed at once to a callback that runs free_block (as PyTorch does inside
// process_events: a block whose count reached 0 must be back in its pool
// before a neighbour's free_block looks at it).
//
// Caller-supplied events stand for work of the process that freed the
// block, which may never complete them (a buggy client, or one killed
// before its stream ran): they are never waited for, only queried, even
// where pooled events are waited for (Synchronize), since a wait would hold
// the device's lock forever. When that client goes away (RemoveClient),
// they are abandoned (AbandonForeign) without even a query: its work died
// with it. The allocator selects them by the block's charged client, which
// in the daemon is always the session that freed it. Pooled events are
// recorded on daemon streams, whose work is finite, and are waited for.
//
// Backend errors from event calls never fail or crash the daemon: each is
// logged once and the event counts as completed. A broken device is reported
// by the calls that use it (allocations, copies, kernels); holding its blocks
// back forever would only leak them, and an event that cannot be recorded
// on a stream the client already destroyed says nothing about later reuse.
//
// Not thread-safe: the owning DeviceAllocator's mutex guards it.

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/ids.h"
#include "server/allocator/block.h"
#include "server/backend/device_backend.h"

namespace gpumux {

class BlockEvents {
 public:
  // Runs free_block for a block whose last event completed. It must not
  // call back into this object.
  using OnReady = absl::FunctionRef<void(Block*)>;

  // `backend` must outlive this; pooled events are created on `device`.
  BlockEvents(DeviceIndex device, DeviceBackend* backend);
  // Destroys every event it holds, pooled or outstanding, without waiting.
  ~BlockEvents();
  BlockEvents(const BlockEvents&) = delete;
  BlockEvents& operator=(const BlockEvents&) = delete;

  // True when no event is outstanding: process_events has nothing to do.
  bool empty() const { return outstanding_ == 0; }
  size_t outstanding() const { return outstanding_; }
  size_t pooled() const { return pool_.size(); }

  // insert_events for a freed `block`: records a pooled event on each of its
  // stream_uses (emptying them) and takes ownership of each `wait_for` event,
  // adding one to block->event_count per event. Events that fail to be
  // created or recorded are logged and not counted; when none is counted the
  // caller frees the block at once.
  void Insert(Block* block, absl::Span<const BackendEvent> wait_for);

  // process_events: per stream, pops events in FIFO order up to the first not
  // yet complete; caller-supplied events are each queried (they come from
  // unrelated streams, so one must not hold back the others).
  void Poll(OnReady on_ready);

  // synchronize_and_free_events over the outstanding events of blocks for
  // which `wanted` holds: waits for each pooled event (SynchronizeEvent) and
  // retires it; then queries each caller-supplied one, retiring those that
  // completed and keeping the rest pending, never waiting for them. A block
  // with a caller event still pending stays pending (active, in no pool), so
  // nothing that releases cached memory after this counts it.
  void Synchronize(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready);

  // Destroys the caller-supplied events of blocks for which `wanted` holds
  // without querying or waiting, and counts each as completed; pooled events
  // stay. For events that stand for the work of a client process that is
  // gone: such an event may never complete (nothing is left to complete an
  // interprocess event the process recorded on its own stream), and the work
  // it stood for died with the process. Returns how many it dropped.
  size_t AbandonForeign(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready);

 private:
  struct Pending {
    BackendEvent event;
    Block* block = nullptr;
    bool pooled = false;  // from pool_ (else caller-supplied: destroyed after)
  };

  // Retires `p`: its event goes back to the pool (or is destroyed when it is
  // caller-supplied or failed), and its block is readied on its last event.
  void Complete(const Pending& p, bool healthy, OnReady on_ready);
  // Queries the caller-supplied events of blocks for which `wanted` holds,
  // each on its own (they come from unrelated streams), and retires those
  // that completed.
  void QueryForeign(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready);
  // Waits for the pooled event of `p` (SynchronizeEvent), then retires it.
  void SyncAndComplete(const Pending& p, OnReady on_ready);
  void Destroy(BackendEvent event);
  void LogError(const char* what, BackendEvent event, const absl::Status& status);

  const DeviceIndex device_;
  DeviceBackend* const backend_;
  // Events recorded by Insert, per stream, oldest first.
  absl::flat_hash_map<BackendStream, std::deque<Pending>> by_stream_;
  // Caller-supplied events, in arrival order.
  std::vector<Pending> foreign_;
  size_t outstanding_ = 0;
  // PyTorch's EventPool: default flags (no timing), reused.
  std::vector<BackendEvent> pool_;
  uint64_t errors_ = 0;
};

}  // namespace gpumux
