#pragma once

// Stream: a handle to one of the session's streams on a device, like
// torch.cuda.Stream: cheap to copy, compared by (client, device, id), never
// owning. Stream 0 is the session's default stream of the device. Streams
// live until Client::DestroyStream or the end of the session; a handle to a
// destroyed stream gets NOT_FOUND from the daemon. Work on one stream runs in
// order; different streams run independently.
//
// A Stream must not outlive its Client. Thread-safe: every method is one RPC.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpumux/common/ids.h"

namespace gpumux {

class Client;
class Event;

// torch.cuda.Stream.priority_range(): numerically lower is higher priority,
// so greatest <= least (CUDA on Hopper: least 0, greatest -5).
struct StreamPriorities {
  int least = 0;
  int greatest = 0;
};

class Stream {
 public:
  // Wraps stream `id` of `client`'s session on `device` (torch.cuda.Stream
  // (stream_id=..., device_index=...)); nothing is checked until it is used.
  // `priority` is what the handle reports; the daemon keeps the real one.
  Stream(Client& client, DeviceIndex device, StreamId id, int priority = 0)
      : client_(&client), device_(device), id_(id), priority_(priority) {}

  Client* client() const { return client_; }
  DeviceIndex device() const { return device_; }
  StreamId id() const { return id_; }
  // As created: after the daemon clamped it into the device's range.
  int priority() const { return priority_; }
  bool is_default() const { return id_.value() == 0; }

  // stream.query(): true when all work queued so far has completed.
  absl::StatusOr<bool> Query() const;
  // stream.synchronize(): returns once all work queued before it completed,
  // with the session's asynchronous error on the device (Client::Synchronize).
  absl::Status Synchronize() const;
  // stream.wait_event(event): later work here waits for the work `event`
  // captured when it was last recorded (on any device). An event never
  // recorded (not yet created) adds no wait and costs no RPC.
  // INVALID_ARGUMENT for an event of another Client.
  absl::Status WaitEvent(const Event& event) const;
  // stream.wait_stream(other): later work here waits for the work queued on
  // `other` so far. INVALID_ARGUMENT for a stream of another Client.
  absl::Status WaitStream(const Stream& other) const;
  // stream.record_event(): a new Event (default options) recorded here.
  absl::StatusOr<Event> RecordEvent() const;
  // stream.record_event(event): records `event` here (creating it on this
  // device if it was not yet). Errors as Event::Record.
  absl::Status RecordEvent(Event& event) const;

  friend bool operator==(const Stream& a, const Stream& b) {
    return a.client_ == b.client_ && a.device_ == b.device_ && a.id_ == b.id_;
  }

 private:
  Client* client_;
  DeviceIndex device_;
  StreamId id_;
  int priority_;
};

}  // namespace gpumux
