#pragma once

// HostLocalStreams: LocalStreams without a GPU. Each stream is a queue of
// emulated work items (EnqueueWork) that complete late: an item is done
// once its time has come and, with `lag_operations`, once that many more
// items were queued on its device after it (a GPU running that many kernels
// behind the CPU). Items of one stream complete in order. Waiting
// (SynchronizeStream, SynchronizeEvent) sleeps until the items' times and
// then counts them done, as a CPU waiting for a GPU lets it catch up. With
// no work queued every stream is idle, so a client on the host backend
// behaves as before: the default LocalStreams of a host-backend client is
// one with no lag.
//
// For tests it can pretend a stream is capturing a graph (BeginCapture):
// then querying or waiting on anything of that device, or recording an
// event on that stream, fails FAILED_PRECONDITION (CUDA forbids the first,
// and would make the record a node of the graph), and each such call is
// counted (capture_violations), as are all waits (synchronizations).
//
// Thread-safe.

#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpumux/local_streams.h"

namespace gpumux {

class HostLocalStreams final : public LocalStreams {
 public:
  struct Options {
    // An item completes only once this many more items were queued on its
    // device (0: time alone decides).
    uint64_t lag_operations = 0;
  };

  HostLocalStreams() : HostLocalStreams(Options{}) {}
  explicit HostLocalStreams(Options options) : options_(options) {}

  absl::StatusOr<LocalEventId> CreateEvent(DeviceIndex device) override;
  void DestroyEvent(LocalEventId event) override;
  absl::Status RecordEvent(LocalEventId event, DeviceIndex device, LocalStream stream) override;
  absl::StatusOr<bool> QueryEvent(LocalEventId event) override;
  absl::Status SynchronizeEvent(LocalEventId event) override;
  absl::Status SynchronizeStream(DeviceIndex device, LocalStream stream) override;
  bool Capturing(DeviceIndex device, LocalStream stream) override;
  absl::Status EnqueueWork(DeviceIndex device, LocalStream stream,
                           absl::Duration duration) override;

  // Pretends `stream` of `device` captures a graph until EndCapture.
  void BeginCapture(DeviceIndex device, LocalStream stream);
  void EndCapture(DeviceIndex device, LocalStream stream);

  // Whether all work queued on `stream` so far completed (no waiting).
  bool Idle(DeviceIndex device, LocalStream stream);
  // Queries and waits made while a stream of their device was capturing.
  uint64_t capture_violations() const;
  // SynchronizeEvent and SynchronizeStream calls so far.
  uint64_t synchronizations() const;
  // QueryEvent calls so far.
  uint64_t queries() const;

 private:
  struct Item {
    uint64_t seq = 0;
    absl::Time ready_at;
    uint64_t ready_after_ops = 0;  // the device's queued-item count it needs
  };
  struct StreamState {
    std::deque<Item> queue;  // not yet done, oldest first
    uint64_t next_seq = 1;
    uint64_t done_seq = 0;  // every item up to it is done
  };
  using StreamKey = std::pair<DeviceIndex, LocalStream>;
  struct EventState {
    DeviceIndex device;
    StreamKey stream;
    uint64_t seq = 0;  // 0: never recorded
  };

  StreamState& StreamLocked(const StreamKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retires the items at the front of `stream` that are done by now.
  void AdvanceLocked(const StreamKey& key, StreamState& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION (counted) while a stream of `device` captures.
  absl::Status CheckNotCapturingLocked(DeviceIndex device, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the items of `key` up to `seq` are done, and counts them so.
  void WaitForLocked(const StreamKey& key, uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<StreamKey, StreamState> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<DeviceIndex, uint64_t> device_ops_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, EventState> events_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_set<StreamKey> capturing_ ABSL_GUARDED_BY(mu_);
  uint64_t capture_violations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t synchronizations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t queries_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpumux
