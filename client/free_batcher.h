#pragma once

// Batches a client's frees, for torch's `del x` semantics at a fraction of
// the round trips: freeing a DeviceBuffer only queues its id. Queued ids leave
// on the next Allocate request (Take), on an explicit Flush (which the client
// does before every other memory RPC, so stats reflect the frees), or from a
// background thread within `delay` of being queued. Thread-safe.

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpumux/common/ids.h"

namespace gpumux {

// Queued frees: the ids, and the interprocess events (CUDA free fences,
// 64-byte handles, each once) every one of them waits on before the daemon
// reuses its memory. A batch waits on the union of its frees' events, which
// is only ever later than each free needs.
struct FreeBatch {
  std::vector<AllocationId> ids;
  std::vector<std::string> wait_event_handles;
};

class FreeBatcher {
 public:
  // Sends one batch to the daemon (one Free RPC). Called without the
  // batcher's locks held and never concurrently with itself.
  using SendFn = std::function<absl::Status(const FreeBatch&)>;

  // Starts the background thread.
  explicit FreeBatcher(SendFn send, absl::Duration delay = absl::Milliseconds(1));
  // Stop().
  ~FreeBatcher();
  FreeBatcher(const FreeBatcher&) = delete;
  FreeBatcher& operator=(const FreeBatcher&) = delete;

  // Queues `id`, which waits on `wait_event_handle` unless that is empty;
  // never blocks on the network. The daemon opens a batch's events on the
  // device of each of its blocks, so one batch only carries fences of one
  // device (`fence_device`): a fence of another device than those queued is
  // refused (false, nothing queued); Flush, then enqueue it again. So is any
  // free past a request's bounds (common/base/request_limits.h): a full batch.
  bool Enqueue(AllocationId id, absl::string_view wait_event_handle = {},
               DeviceIndex fence_device = DeviceIndex());

  // Hands everything queued to the caller, who carries it on a request of its
  // own. Waits for a background send in flight first, so the caller's request
  // reaches the daemon after those frees.
  FreeBatch Take();

  // Sends everything queued now with one call of `send` (after any send in
  // flight) and returns its status; OK without a call when nothing is queued.
  absl::Status Flush();

  // Stops the background thread, then Flush()es; idempotent. Ids queued
  // afterwards wait for an explicit Flush or Take.
  absl::Status Stop();

  // Ids queued and not yet taken or sent.
  size_t pending() const;

 private:
  void Run();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.ids.empty();
  }

  const SendFn send_;
  const absl::Duration delay_;
  // Held for a whole send, so sends are ordered and Take can wait them out.
  // Acquired before mu_.
  absl::Mutex send_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  FreeBatch queue_ ABSL_GUARDED_BY(mu_);
  // The device of the fences in queue_ (meaningful while it has any).
  DeviceIndex fence_device_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpumux
