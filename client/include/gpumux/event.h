#pragma once

// Event: the owner of one of the session's events, like torch.cuda.Event. As
// in PyTorch, `Event(client, options)` creates nothing on the daemon: the
// event is created on the device of the first stream it is recorded on (or of
// the current device for IpcHandle). Client::CreateEvent creates one at once;
// Client::OpenEventIpcHandle opens another session's; copies return their
// completion events as Events. Destroying an Event destroys the daemon's
// event (work already queued that records or waits on it is unaffected);
// failures are logged, and nothing is sent once the session has ended.
//
// Move-only. An Event must not outlive its Client. Not thread-safe: one owner
// at a time; const methods may run concurrently with each other.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpumux/common/ids.h"

namespace gpumux {

class Client;
class Stream;

// torch.cuda.Event's flags. An interprocess event cannot also time (CUDA's
// rule): the daemon refuses that with INVALID_ARGUMENT when it creates it.
struct EventOptions {
  bool enable_timing = false;
  // synchronize() sleeps instead of spinning (cudaEventBlockingSync).
  bool blocking = false;
  bool interprocess = false;
};

// Bytes of an interprocess event handle (cudaIpcEventHandle_t).
inline constexpr size_t kEventIpcHandleBytes = 64;

class Event {
 public:
  // An empty event of no client: Query is true, Synchronize and Wait do
  // nothing, everything else is FAILED_PRECONDITION. Copies without a
  // completion event return one.
  Event() = default;
  // torch.cuda.Event(enable_timing, blocking, interprocess); created lazily.
  explicit Event(Client& client, const EventOptions& options = EventOptions());
  Event(Event&& other) noexcept;
  // Destroys what this event held, then takes over `other`'s.
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  Client* client() const { return client_; }
  const EventOptions& options() const { return options_; }
  // Whether the daemon has the event yet.
  bool created() const { return id_ != 0; }
  // The device it was created on; nullopt before.
  std::optional<DeviceIndex> device() const;
  // The daemon's event id; 0 before creation.
  uint64_t id() const { return id_; }

  // event.record(): on the calling thread's current stream of the client's
  // current device.
  absl::Status Record();
  // event.record(stream): captures the work queued on `stream` so far,
  // creating the event on its device first if needed. Re-recording replaces
  // the capture. INVALID_ARGUMENT (from the daemon) for a stream on another
  // device than the event's, here for a stream of another Client;
  // NOT_FOUND for a destroyed stream; INVALID_ARGUMENT or RESOURCE_EXHAUSTED
  // from creation (see Client::CreateEvent).
  absl::Status Record(const Stream& stream);
  // event.query(): true when the captured work completed, or never recorded
  // (no RPC when the event was never created).
  absl::StatusOr<bool> Query() const;
  // event.synchronize(): returns once the captured work completed, with the
  // session's asynchronous error on the device (Client::Synchronize); at
  // once when never recorded.
  absl::Status Synchronize() const;
  // event.wait(): the calling thread's current stream of the current device
  // waits for this event; event.wait(stream): `stream` does. Never-created
  // events add no wait (no RPC).
  absl::Status Wait() const;
  absl::Status Wait(const Stream& stream) const;
  // start.elapsed_time(end) in milliseconds. FAILED_PRECONDITION when either
  // was never created ("Both events must be recorded before calculating
  // elapsed time.", checked here as PyTorch does), and from the daemon when
  // either lacks enable_timing, was never recorded or has not completed.
  absl::StatusOr<float> ElapsedTime(const Event& end) const;
  // event.ipc_handle(): the 64 bytes another session opens the event with
  // (Client::OpenEventIpcHandle), or that memory::Free waits on. Creates the
  // event on the current device first if needed, as PyTorch does.
  // FAILED_PRECONDITION (from the daemon) unless the event is interprocess.
  absl::StatusOr<std::string> IpcHandle();

 private:
  friend class Client;

  // An event the daemon already created (id != 0).
  Event(Client* client, const EventOptions& options, DeviceIndex device, uint64_t id,
        std::string ipc_handle);
  absl::Status CreateOn(DeviceIndex device);
  // Destroys the daemon's event, if any, and empties this Event.
  void Reset();

  Client* client_ = nullptr;
  EventOptions options_;
  DeviceIndex device_;
  uint64_t id_ = 0;
  // Cached once known (IpcHandle, or sent along with a completion event).
  std::string ipc_handle_;
};

}  // namespace gpumux
