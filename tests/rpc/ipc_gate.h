#pragma once

// IpcGate: an interprocess event of the daemon that the test records itself
// and completes only when it calls Release, as a client recording its own
// work would: created in `session`, its memory file fetched from the memory
// socket and mapped here. A daemon stream told to wait on it (Block) holds
// all work queued after that until Release, which makes "work still pending"
// states deterministic without timing guesses. The destructor releases it,
// so a failing test never leaves a daemon stream blocked at shutdown.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/ipc/memory_socket.h"
#include "gpumux/common/host_ipc_event.h"
#include "gtest/gtest.h"
#include "tests/rpc/stream_calls.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {

class IpcGate {
 public:
  // The daemon at `socket_path` makes the event, in `session` on `device`.
  IpcGate(RawSession& session, const std::string& socket_path, int device = 0) : session_(session) {
    event_id_ = NewEvent(session, device, EventKind{.interprocess = true});
    grpc::Status got = GetIpcHandle(session, event_id_, &handle_);
    if (!got.ok()) {
      ADD_FAILURE() << "gate handle: " << got.error_message();
      return;
    }
    absl::StatusOr<SealedMemory> memory =
        FetchMemory(session, socket_path, KeyOf(handle_), kHostIpcEventFileBytes);
    absl::StatusOr<std::unique_ptr<HostIpcEvent>> event =
        memory.ok() ? HostIpcEvent::Adopt(*std::move(memory), "gate")
                    : absl::StatusOr<std::unique_ptr<HostIpcEvent>>(memory.status());
    if (!event.ok()) {
      ADD_FAILURE() << "cannot map the gate's event: " << event.status();
      return;
    }
    event_ = *std::move(event);
    generation_ = event_->Record();
  }
  // Releases; the event itself ends with its session (or Destroy).
  ~IpcGate() { Release(); }
  IpcGate(const IpcGate&) = delete;
  IpcGate& operator=(const IpcGate&) = delete;

  // Destroys the daemon's event (after Release): its handle names nothing any more.
  void Destroy() {
    Release();
    EXPECT_TRUE(DestroyEvent(session_, event_id_).ok());
  }

  // The 64-byte handle (Event.OpenIpcHandle, Memory.Free's wait_event_handles).
  const std::string& handle() const { return handle_; }

  // Opens the gate's handle as an event of `session` on `device` and makes
  // `stream` (on `device`) wait on it. Returns the session's event id (0 on
  // failure, with a test failure).
  uint64_t Block(RawSession& session, int device, uint64_t stream) {
    uint64_t event = 0;
    grpc::Status opened = OpenIpcHandle(session, device, handle(), &event);
    EXPECT_TRUE(opened.ok()) << opened.error_message();
    grpc::Status waited = WaitEvent(session, device, stream, event);
    EXPECT_TRUE(waited.ok()) << waited.error_message();
    return event;
  }

  // Completes the record: every stream waiting on the gate runs on.
  void Release() {
    if (event_ == nullptr || released_) return;
    released_ = true;
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    event_->Complete(generation_,
                     std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  }

 private:
  static std::string KeyOf(const std::string& handle) {
    absl::StatusOr<std::string> key = HostIpcEventKey(handle);
    return key.ok() ? *key : std::string();
  }

  RawSession& session_;
  uint64_t event_id_ = 0;
  std::string handle_;
  std::unique_ptr<HostIpcEvent> event_;
  uint64_t generation_ = 0;
  bool released_ = false;
};

}  // namespace gpumux::testing
