#pragma once

// IpcGate: an interprocess event the test itself owns, as a client process
// would (common/host_ipc_event.h), recorded once and completed only when the
// test calls Release. A daemon stream told to wait on it (Block) holds all
// work queued after that until Release, which makes "work still pending"
// states deterministic without timing guesses. The destructor releases it,
// so a failing test never leaves a daemon stream blocked at shutdown.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/host_ipc_event.h"
#include "gtest/gtest.h"
#include "tests/rpc/stream_calls.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {

class IpcGate {
 public:
  IpcGate() {
    absl::StatusOr<std::unique_ptr<HostIpcEvent>> event = HostIpcEvent::Create("/gpumux-test");
    if (!event.ok()) {
      ADD_FAILURE() << "cannot create an interprocess event: " << event.status();
      return;
    }
    event_ = *std::move(event);
    generation_ = event_->Record();
  }
  ~IpcGate() { Release(); }
  IpcGate(const IpcGate&) = delete;
  IpcGate& operator=(const IpcGate&) = delete;

  // The 64-byte handle (Event.OpenIpcHandle, Memory.Free's wait_event_handles).
  std::string handle() const { return event_ == nullptr ? std::string() : event_->handle(); }

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
    event_->Complete(generation_, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  }

 private:
  std::unique_ptr<HostIpcEvent> event_;
  uint64_t generation_ = 0;
  bool released_ = false;
};

}  // namespace gpumux::testing
