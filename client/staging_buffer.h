#pragma once

// StagingBuffer: the session's staging buffer (Copy.GetStagingBuffer), shared
// host memory mapped into this process that staged copies move bytes through
// without carrying them in messages, and the queued work still reading it.
// Staged host-to-device copies alternate between the two halves, so the
// client fills one while the daemon copies from the other; before a half is
// written again, the copy that last read it must have completed. Its
// completion event is waited on in this process (LocalEvent: the mapped host
// event, or the CUDA event opened here; no RPC) where the handle opens here,
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
#include "client/local_event.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/common/sealed_memory.h"
#include "gpumux/event.h"
#include "gpumux/v1/copy.pb.h"

namespace gpumux {

// Work queued on the daemon that reads a half of the staging buffer.
struct StagedWork {
  // Its completion event; empty when `local` suffices and the Event went to
  // the caller.
  Event event;
  // The same event opened here; null where it does not open here.
  std::unique_ptr<LocalEvent> local;
};

class StagingBuffer {
 public:
  // Says whether the session still lives: OK, or the status to give up with.
  using SessionCheck = absl::FunctionRef<absl::Status()>;

  // Fetches the buffer the daemon described from `memory_files` and maps it.
  // INTERNAL for a handle that is not HANDLE_KIND_HOST_MEMFD or a size below
  // 2 bytes; MemoryFileFetcher::Fetch's and mmap's errors. `memory_files`
  // must outlive the buffer (its completion events are fetched there too).
  static absl::StatusOr<std::unique_ptr<StagingBuffer>> Map(const v1::StagingBuffer& proto,
                                                            MemoryFileFetcher* memory_files);

  char* data() const { return static_cast<char*>(mapping_.data()); }
  uint64_t size() const { return mapping_.size(); }
  bool pinned() const { return pinned_; }
  uint64_t half_size() const { return size() / 2; }
  // Offset of half `slot` (0 or 1) in the buffer.
  uint64_t half_offset(int slot) const { return slot * half_size(); }

  // Tracks a completion event of work that reads half `slot`, replacing
  // (without waiting for) whatever was tracked there. `local` is opened from
  // `ipc_handle` (a CUDA one when `cuda`: the daemon's backend) if it can be.
  void Track(int slot, Event event, absl::string_view ipc_handle, bool cuda);
  // True when Track opened `slot`'s event here, so its Event is not needed
  // for waiting.
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
  StagingBuffer(MemoryMapping mapping, bool pinned, MemoryFileFetcher* memory_files)
      : mapping_(std::move(mapping)), pinned_(pinned), memory_files_(memory_files) {}

  MemoryMapping mapping_;
  bool pinned_;
  MemoryFileFetcher* memory_files_;
  std::array<std::optional<StagedWork>, 2> pending_;
};

}  // namespace gpumux
