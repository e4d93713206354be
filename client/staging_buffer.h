#pragma once

// StagingBuffer: the session's staging buffer (Copy.GetStagingBuffer), shared
// host memory mapped into this process that staged copies move bytes through
// without carrying them in messages, and the queued work still reading it.
// Staged host-to-device copies alternate between the two halves, so the
// client fills one while the daemon copies from the other; before a half is
// written again, the copy that last read it must have completed. Its
// completion event is waited on through the mapped interprocess event
// (common/host_ipc_event.h, no RPC) where the daemon's handle is a host one,
// and with Event.Synchronize otherwise.
//
// Not thread-safe: the Client serializes all staged copies under one lock.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/event.h"
#include "client/shm_mapping.h"
#include "common/host_ipc_event.h"
#include "gpumux/v1/copy.pb.h"

namespace gpumux {

// Work queued on the daemon that reads a half of the staging buffer.
struct StagedWork {
  // Its completion event; empty when `local` suffices and the Event went to
  // the caller.
  Event event;
  // The same event mapped here, and the generation that completes the work;
  // null where the handle is not a host one.
  std::unique_ptr<HostIpcEvent> local;
  uint64_t generation = 0;
};

class StagingBuffer {
 public:
  // Says whether the session still lives: OK, or the status to give up with.
  using SessionCheck = absl::FunctionRef<absl::Status()>;

  // Maps the buffer the daemon described. INTERNAL for a handle that is not
  // HANDLE_KIND_HOST_SHM or a size below 2 bytes; ShmMapping::Open's errors.
  static absl::StatusOr<std::unique_ptr<StagingBuffer>> Map(const v1::StagingBuffer& proto);

  char* data() const { return static_cast<char*>(mapping_->base()); }
  uint64_t size() const { return mapping_->size(); }
  bool pinned() const { return pinned_; }
  uint64_t half_size() const { return size() / 2; }
  // Offset of half `slot` (0 or 1) in the buffer.
  uint64_t half_offset(int slot) const { return slot * half_size(); }

  // Tracks a completion event of work that reads half `slot`, replacing
  // (without waiting for) whatever was tracked there. `local` is opened from
  // `ipc_handle` when that is a host handle.
  void Track(int slot, Event event, absl::string_view ipc_handle);
  // True when Track found a host handle for `slot`'s work, so its Event is
  // not needed for waiting.
  bool WaitsLocally(int slot) const;
  // Hands out the Event tracked for `slot`, keeping only the local wait;
  // precondition: WaitsLocally(slot).
  Event TakeEvent(int slot);

  // Waits until the work tracked for `slot` completed and forgets it.
  // Local waits give up with `check`'s status once it is not OK (a daemon
  // that died never completes them).
  absl::Status Wait(int slot, SessionCheck check);
  absl::Status WaitAll(SessionCheck check);

 private:
  StagingBuffer(std::unique_ptr<ShmMapping> mapping, bool pinned)
      : mapping_(std::move(mapping)), pinned_(pinned) {}

  std::unique_ptr<ShmMapping> mapping_;
  bool pinned_;
  std::array<std::optional<StagedWork>, 2> pending_;
};

}  // namespace gpumux
