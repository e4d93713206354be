#pragma once

// Helpers of the client tests that run against the daemon in-process
// (tests/support/daemon_client_test.h): seeded host bytes, and a Gate that holds a stream back for
// as long as the test wants, so that "still pending" is a fact rather than a race.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "gpumux/client.h"
#include "gpumux/common/host_ipc_event.h"
#include "gtest/gtest.h"
#include "tests/support/test_pattern.h"

namespace gpumux::testing {

// `size` bytes of test_pattern.h's pattern for `seed` (never zeros).
inline std::string Pattern(uint64_t size, uint64_t seed) {
  std::string bytes(size, '\0');
  FillPattern(bytes.data(), size, seed);
  return bytes;
}

// An interprocess event of the client that the test records itself through
// the event mapped here (Client::MapIpcEvent), as another process may (the
// host backend's interprocess events live in sealed memory files). A stream that Holds
// on it waits until Open(). Opens on destruction, so nothing waits forever.
class Gate {
 public:
  explicit Gate(Client& client, DeviceIndex device = DeviceIndex(0)) {
    EventOptions interprocess;
    interprocess.interprocess = true;
    absl::StatusOr<Event> event = client.CreateEvent(device, interprocess);
    if (!event.ok()) {
      ADD_FAILURE() << "gate event: " << event.status();
      return;
    }
    event_ = std::move(event).value();
    absl::StatusOr<std::string> handle = event_.IpcHandle();
    if (!handle.ok()) {
      ADD_FAILURE() << "gate handle: " << handle.status();
      return;
    }
    absl::StatusOr<std::unique_ptr<HostIpcEvent>> local = client.MapIpcEvent(*handle);
    if (!local.ok()) {
      ADD_FAILURE() << "gate mapping: " << local.status();
      return;
    }
    local_ = std::move(local).value();
    generation_ = local_->Record();
  }
  ~Gate() { Open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // Later work on `stream` waits until Open().
  absl::Status Hold(const Stream& stream) const { return stream.WaitEvent(event_); }
  void Open() {
    if (local_ == nullptr || open_) return;
    open_ = true;
    local_->Complete(generation_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count());
  }
  const Event& event() const { return event_; }
  Event& event() { return event_; }  // for IpcHandle

 private:
  Event event_;
  std::unique_ptr<HostIpcEvent> local_;
  uint64_t generation_ = 0;
  bool open_ = false;
};

}  // namespace gpumux::testing
