#pragma once

// BlockEvents: the events one device's freed blocks wait on before they may be
// reused, i.e. PyTorch's cuda_events (a FIFO of (event, block) per stream),
// its EventPool, and insert_events / process_events /
// synchronize_and_free_events. A block freed after recordStream gets one
// pooled event recorded on each stream that used it; a block freed with
// caller-supplied events (`wait_for`, e.g. an interprocess event a client
// recorded on its own stream) also waits on those. One caller event is
// opened once per free request and shared by every block of that request,
// so a request of n ids and k events costs n + k, not n * k. Each block
// whose last event completes is handed at once to a callback that runs
// free_block (as PyTorch does inside process_events: a block whose count
// reached 0 must be back in its pool before a neighbour's free_block looks
// at it).
//
// Streams end while blocks that used them are still live: a client destroys
// a stream after queueing work on an allocation it frees later. Before the
// backend stream is destroyed, RetireStream records one last event on it,
// after all of its work, and that event stands in for the stream at every
// later free of a block whose recordStream named it. Nothing is recorded
// when no live block names the stream, so retiring costs nothing in the
// common case. (PyTorch never destroys its pooled streams, so it has no such
// case; without this a free could not record on the dead stream and the
// block would be reused while the stream's work still wrote into it.)
//
// Caller-supplied events stand for work of the process that freed the
// block, which may never complete them (a buggy client, or one killed
// before its stream ran): they are never waited for, only queried, even
// where pooled events are waited for (Synchronize), since a wait would hold
// the device's lock forever. When that client goes away (RemoveClient),
// they are abandoned (AbandonForeign) without even a query: its work died
// with it. The allocator selects them by the block's charged client, which
// in the daemon is always the session that freed it. Pooled and retired
// streams' events are recorded on daemon streams, whose work is finite, and
// are waited for.
//
// Backend errors from event calls never fail or crash the daemon: each is
// logged once and the event counts as completed. A broken device is reported
// by the calls that use it (allocations, copies, kernels); holding its blocks
// back forever would only leak them.
//
// Not thread-safe: the owning DeviceAllocator's mutex guards it.

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "allocator/block.h"
#include "common/segments/segment_source.h"
#include "gpumux/common/ids.h"

namespace gpumux {

class BlockEvents {
 public:
  // Runs free_block for a block whose last event completed. It must not
  // call back into this object.
  using OnReady = absl::FunctionRef<void(Block*)>;

  // `backend` must outlive this; pooled events are created on `device`.
  BlockEvents(DeviceIndex device, SegmentSource* backend);
  // Destroys every event it holds, pooled or outstanding, without waiting.
  ~BlockEvents();
  BlockEvents(const BlockEvents&) = delete;
  BlockEvents& operator=(const BlockEvents&) = delete;

  // True when no event is outstanding: process_events has nothing to do.
  bool empty() const { return outstanding_ == 0; }
  // (event, block) pairs outstanding.
  size_t outstanding() const { return outstanding_; }
  size_t pooled() const { return pool_.size(); }
  // Events several blocks may wait on (caller events, retired streams' last
  // events) still held.
  size_t shared() const { return shared_.size(); }

  // A live block added `stream` to its stream_uses (recordStream).
  void AddStreamUse(BackendStream stream);

  // The backend is about to destroy `stream`, and no more work will be
  // queued on it. When a live block's stream_uses name it, records one last
  // event on it that their frees wait on instead.
  void RetireStream(BackendStream stream);

  // Takes ownership of caller-supplied events (already recorded) for the
  // Inserts of one free request; EndCallerEvents after them gives up the
  // request's hold, and an event no block waits on is destroyed then.
  void BeginCallerEvents(absl::Span<const BackendEvent> events);
  void EndCallerEvents(absl::Span<const BackendEvent> events);

  // insert_events for a freed `block`: records a pooled event on each of its
  // stream_uses (emptying them; a retired stream's last event is waited on
  // instead) and waits on each of `wait_for`, which BeginCallerEvents took,
  // adding one to block->event_count per event. Events that fail to be
  // created or recorded are logged and not counted; when none is counted the
  // caller frees the block at once.
  void Insert(Block* block, absl::Span<const BackendEvent> wait_for);

  // process_events: per stream, pops events in FIFO order up to the first not
  // yet complete; shared events are each queried once (they come from
  // unrelated streams, so one must not hold back the others).
  void Poll(OnReady on_ready);

  // synchronize_and_free_events over the outstanding events of blocks for
  // which `wanted` holds: waits for each pooled and retired-stream event
  // (SynchronizeEvent) and retires it; then queries each caller-supplied one,
  // retiring those that completed and keeping the rest pending, never
  // waiting for them. A block with a caller event still pending stays
  // pending (active, in no pool), so nothing that releases cached memory
  // after this counts it.
  void Synchronize(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready);

  // Stops the blocks for which `wanted` holds from waiting on caller-supplied
  // events, without querying or waiting, as if those had completed; pooled
  // events stay. For events that stand for the work of a client process that
  // is gone: such an event may never complete (nothing is left to complete an
  // interprocess event the process recorded on its own stream), and the work
  // it stood for died with the process. Returns how many waits it dropped.
  size_t AbandonForeign(absl::FunctionRef<bool(const Block*)> wanted, OnReady on_ready);

 private:
  // A pooled event recorded on a stream for one block.
  struct Pending {
    BackendEvent event;
    Block* block = nullptr;
  };
  // An event any number of blocks wait on.
  struct Shared {
    std::vector<Block*> blocks;  // waiting on it now
    // Holds besides the blocks: a free request between Begin and End, a
    // retired stream some live block still names. At 0 holds and no blocks
    // the event is destroyed.
    int holds = 0;
    bool caller = false;     // a client's event: queried only, abandoned with its client
    bool completed = false;  // seen complete (or failed): later waiters skip it
  };
  // The live blocks naming a stream in their stream_uses, and its last event
  // once it was retired.
  struct StreamUses {
    size_t live = 0;
    BackendEvent retired_last;  // 0 while the stream lives
  };

  // An event from pool_, or a new one.
  absl::StatusOr<BackendEvent> TakePooled();
  // `block` waits on the shared event `event` unless it already completed.
  void Wait(Block* block, BackendEvent event);
  // One use of `stream` by a block went away (freed).
  void DropStreamUse(BackendStream stream);
  // Marks `shared` complete (it did, or failed: either way it is done) and
  // readies every block waiting on it.
  void CompleteShared(Shared& shared, OnReady on_ready);
  // Gives up one hold of `event`, destroying it when nothing is left.
  void Unhold(BackendEvent event);
  // Destroys the shared events that no block waits on and nothing holds.
  void SweepShared();
  // Retires a pooled `p`: its event goes back to the pool (or is destroyed
  // when it failed), and its block is readied on its last event.
  void Complete(const Pending& p, bool healthy, OnReady on_ready);
  // One of `block`'s events is done; frees it on its last.
  void ReadyOne(Block* block, OnReady on_ready);
  // Waits for the pooled event of `p` (SynchronizeEvent), then retires it.
  void SyncAndComplete(const Pending& p, OnReady on_ready);
  void Destroy(BackendEvent event);
  void LogError(const char* what, BackendEvent event, const absl::Status& status);

  const DeviceIndex device_;
  SegmentSource* const backend_;
  // Events recorded by Insert, per stream, oldest first.
  absl::flat_hash_map<BackendStream, std::deque<Pending>> by_stream_;
  absl::flat_hash_map<BackendEvent, Shared> shared_;
  absl::flat_hash_map<BackendStream, StreamUses> stream_uses_;
  size_t outstanding_ = 0;
  // PyTorch's EventPool: default flags (no timing), reused.
  std::vector<BackendEvent> pool_;
  uint64_t errors_ = 0;
};

}  // namespace gpumux
