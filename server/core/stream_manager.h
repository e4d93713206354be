#pragma once

// StreamManager: torch.cuda.Stream and torch.cuda.Event for every session,
// over the backend's streams and events. Each session has its own default
// stream (id 0) per device, created on first use, so sessions never queue
// behind each other; streams it creates and events it creates or opens get
// daemon-wide unique ids (so another session's id is NOT_FOUND, as is an id
// never issued or destroyed). Everything a session holds is destroyed when
// it ends; work already queued still completes. Blocking calls (synchronize)
// run without the manager's lock. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"
#include "server/core/device_profiler.h"
#include "server/core/limit_refusal.h"
#include "server/core/tenant_shares.h"

namespace gpumux {

// A session's stream, resolved to the backend's.
struct ResolvedStream {
  StreamId id;  // as the session names it (0: its default stream on `device`)
  DeviceIndex device;
  BackendStream backend;
};

struct EventView {
  EventId id;
  DeviceIndex device;
  EventFlags flags;
};

// An interprocess event recorded after some work, for the client to wait on
// (DeviceWork's completion events).
struct CompletionEvent {
  EventId id;
  std::string ipc_handle;
};

struct StreamCounts {
  size_t streams = 0;  // created ones; default streams are not counted
  size_t events = 0;
};

// Daemon-wide budgets over all sessions (gpumuxd --max-streams,
// --max-events): RESOURCE_EXHAUSTED beyond them, naming the flag, and a log
// line. Default streams (one per session and device once used) are not
// counted; sessions are bounded by SessionRegistry. A tenant holds at most a
// quarter of each (TenantShares).
struct StreamLimits {
  size_t max_streams = 16384;
  size_t max_events = 1 << 20;
};

class StreamManager {
 public:
  // Per-session limits (DESIGN §5): RESOURCE_EXHAUSTED beyond them.
  static constexpr size_t kMaxStreamsPerSession = 1024;
  static constexpr size_t kMaxEventsPerSession = 65536;

  using Limits = StreamLimits;

  // `backend` (and `profiler`, which may be null) must outlive the manager.
  explicit StreamManager(DeviceBackend* backend, Limits limits = {},
                         DeviceProfiler* profiler = nullptr)
      : backend_(backend), limits_(limits), profiler_(profiler) {}
  // Destroys whatever sessions still hold.
  ~StreamManager();
  StreamManager(const StreamManager&) = delete;
  StreamManager& operator=(const StreamManager&) = delete;

  // Destroys a backend stream a session held (created, or a default stream);
  // the backend's DestroyStream unless set. MemoryManager sets it so that
  // allocations keep waiting for the work queued on a stream that ends.
  // Set it before any session is added.
  using StreamDestroyer = std::function<absl::Status(DeviceIndex, BackendStream)>;
  void set_stream_destroyer(StreamDestroyer destroyer) { destroyer_ = std::move(destroyer); }

  // `tenant` (NamedTenant) takes the streams' and events' shares.
  void AddSession(SessionId session, std::string tenant = "");
  // Destroys the session's streams (default ones included) and events;
  // returns what it held, default streams not counted.
  StreamCounts ReleaseSession(SessionId session);
  StreamCounts Counts(SessionId session) const;

  // INVALID_ARGUMENT for a device out of range.
  absl::StatusOr<StreamPriorityRange> PriorityRange(DeviceIndex device) const;

  // A new stream; `priority` is clamped into the device's range as
  // torch.cuda.Stream does (the result says which it got).
  // INVALID_ARGUMENT for a bad device, RESOURCE_EXHAUSTED past a limit.
  struct CreatedStream {
    StreamId id;
    int priority = 0;
  };
  absl::StatusOr<CreatedStream> CreateStream(SessionId session, DeviceIndex device, int priority);
  // INVALID_ARGUMENT for the default stream or a stream on another device.
  absl::Status DestroyStream(SessionId session, DeviceIndex device, StreamId stream);

  // The backend stream of (device, stream): 0 is the session's default
  // stream there (created now if needed). INVALID_ARGUMENT for a bad device
  // or a stream on another device; NOT_FOUND for a stream the session does
  // not have; UNAUTHENTICATED once the session ended.
  absl::StatusOr<ResolvedStream> Resolve(SessionId session, DeviceIndex device, StreamId stream);

  // Resolve's checks without creating a default stream.
  absl::Status CheckStream(SessionId session, DeviceIndex device, StreamId stream) const;

  // Errors as Resolve.
  absl::StatusOr<bool> QueryStream(SessionId session, DeviceIndex device, StreamId stream);
  // Waits for the stream; then reports the session's async error on the
  // device, if any (TakeAsyncError).
  absl::Status SynchronizeStream(SessionId session, DeviceIndex device, StreamId stream);
  // QueryStream; when the work is done, also what SynchronizeStream would
  // report then (so a synchronize answered without waiting reports it too).
  absl::StatusOr<bool> TrySynchronizeStream(SessionId session, DeviceIndex device, StreamId stream);
  // stream.wait_event(event); NOT_FOUND for an unknown event.
  absl::Status WaitEvent(SessionId session, DeviceIndex device, StreamId stream, EventId event);
  // stream.wait_stream(other): an internal event recorded on `other` and waited on.
  absl::Status WaitStream(SessionId session, DeviceIndex device, StreamId stream,
                          DeviceIndex other_device, StreamId other);

  // INVALID_ARGUMENT for a bad device or interprocess with enable_timing;
  // RESOURCE_EXHAUSTED past the limit.
  absl::StatusOr<EventView> CreateEvent(SessionId session, DeviceIndex device, EventFlags flags);
  // NOT_FOUND for an event the session does not have (for every call below).
  absl::Status DestroyEvent(SessionId session, EventId event);
  // INVALID_ARGUMENT "Event device X does not match recording stream's
  // device Y." as PyTorch words it; errors of Resolve.
  absl::Status RecordEvent(SessionId session, EventId event, DeviceIndex device, StreamId stream);
  absl::StatusOr<bool> QueryEvent(SessionId session, EventId event);
  // Waits for the event; then reports the session's async error on the
  // event's device, if any (TakeAsyncError).
  absl::Status SynchronizeEvent(SessionId session, EventId event);
  // QueryEvent, and when complete what SynchronizeEvent would report then.
  absl::StatusOr<bool> TrySynchronizeEvent(SessionId session, EventId event);
  // FAILED_PRECONDITION with PyTorch's message when either event lacks
  // timing; INVALID_ARGUMENT for events on two devices; the backend's
  // FAILED_PRECONDITION when one was not recorded or has not completed.
  absl::StatusOr<float> ElapsedTimeMs(SessionId session, EventId start, EventId end);
  // FAILED_PRECONDITION unless the event is interprocess.
  absl::StatusOr<std::string> IpcHandle(SessionId session, EventId event);
  // torch.cuda.Event.from_ipc_handle: INVALID_ARGUMENT for a bad device or a
  // handle that is not kIpcEventHandleBytes long (PyTorch's message) or names
  // no event; NOT_FOUND when its event is gone; RESOURCE_EXHAUSTED past the limit.
  absl::StatusOr<EventView> OpenIpcHandle(SessionId session, DeviceIndex device,
                                          absl::string_view handle);

  // Asynchronous errors, as CUDA reports an asynchronous launch's failure at
  // the next synchronize: work the daemon ran for a session after its call
  // returned (a group collective queued with async_op) that failed notes its
  // status here, before its stream goes on; the session's next synchronize
  // on that device (of the device, a stream or an event, once the wait is
  // over) returns the first such error, with how many failed after it, and
  // clears it. Nothing is kept for a session that ended.
  void NoteAsyncError(SessionId session, DeviceIndex device, absl::Status status);
  // The pending error of (session, device), cleared; OK when none.
  absl::Status TakeAsyncError(SessionId session, DeviceIndex device);

 private:
  struct StreamEntry {
    DeviceIndex device;
    BackendStream backend;
  };
  struct EventEntry {
    DeviceIndex device;
    EventFlags flags;
    BackendEvent backend;
  };
  // The first unreported asynchronous error on a device, and how many came after it.
  struct AsyncError {
    absl::Status first;
    uint64_t later = 0;
  };
  struct Books {
    std::vector<BackendStream> default_streams;  // per device; 0 until first use
    std::vector<AsyncError> async_errors;        // per device
    absl::flat_hash_map<StreamId, StreamEntry> streams;
    absl::flat_hash_map<EventId, EventEntry> events;
    std::string tenant;  // NamedTenant: whose shares its streams and events take
  };

  absl::StatusOr<Books*> BooksLocked(SessionId session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The created stream `stream` (not 0) of `books` on `device`.
  static absl::StatusOr<BackendStream> FindStreamLocked(const Books& books, DeviceIndex device,
                                                        StreamId stream);
  absl::StatusOr<EventEntry> FindEvent(SessionId session, EventId event) const;
  // Adds an event the backend made to the session's books, or destroys it
  // when the session is gone or full.
  absl::StatusOr<EventView> AddEvent(SessionId session, DeviceIndex device, EventFlags flags,
                                     BackendEvent backend);
  absl::Status CheckDevice(DeviceIndex device) const;
  absl::Status DestroyBackendStream(DeviceIndex device, BackendStream stream);
  void DestroyAll(const Books& books);

  DeviceBackend* const backend_;
  const Limits limits_;
  DeviceProfiler* const profiler_;
  StreamDestroyer destroyer_;
  LimitRefusal session_streams_refusal_{"streams per session (1024)"};
  LimitRefusal session_events_refusal_{"events per session (65536)"};
  LimitRefusal streams_refusal_{"--max-streams"};
  LimitRefusal events_refusal_{"--max-events"};
  TenantShares tenant_streams_{"streams", "--max-streams"};
  TenantShares tenant_events_{"events", "--max-events"};
  // Each interprocess event of the host backend holds a memory file: a
  // tenant's share of the daemon's memory-file budget (MemoryFileBudget).
  TenantShares tenant_ipc_events_{"interprocess events", "the memory-file budget"};
  mutable absl::Mutex mu_;
  // Created streams (including those being created) and events of every
  // session, against limits_.
  size_t total_streams_ ABSL_GUARDED_BY(mu_) = 0;
  size_t total_events_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_stream_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_event_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<SessionId, Books> books_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
