#pragma once

// Helpers for the host backend's own tests: a backend with test options, a
// Gate that holds a stream's later work back until the test opens it, so
// tests can observe pending work deterministically instead of racing a slow
// operation, and ReturnsWithin, which bounds a call that must not hang.

#include <fcntl.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "gpumux/common/host_ipc_event.h"
#include "server/backend/host/host_backend.h"
#include "server/backend/memory_file_table.h"

namespace gpumux::testing {

inline constexpr uint64_t kTestMiB = uint64_t{1} << 20;

inline HostBackend::Options HostTestOptions(uint64_t device_memory = 256 * kTestMiB) {
  HostBackend::Options options;
  options.device_count = 2;
  options.device_memory = device_memory;
  return options;
}

// Another mapping of the event in `file`, through a descriptor of its own, as
// another process holding the file has.
inline absl::StatusOr<std::unique_ptr<HostIpcEvent>> AdoptEventCopy(const SealedMemory& file) {
  GPUMUX_ASSIGN_OR_RETURN(
      SealedMemory copy,
      SealedMemory::Adopt(UniqueFd(fcntl(file.fd(), F_DUPFD_CLOEXEC, 0)), kHostIpcEventFileBytes));
  return HostIpcEvent::Adopt(std::move(copy), "test");
}

// The interprocess event `handle` of the host backend `backend`, mapped as a
// client maps it: its memory file as the memory socket hands it out.
inline absl::StatusOr<std::unique_ptr<HostIpcEvent>> OpenBackendEvent(const DeviceBackend& backend,
                                                                      const std::string& handle) {
  const auto* host = dynamic_cast<const HostBackend*>(&backend);
  if (host == nullptr) return absl::InvalidArgumentError("not a host backend");
  GPUMUX_ASSIGN_OR_RETURN(std::string key, HostIpcEventKey(handle));
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<const SealedMemory> file,
                          host->memory_files().Find(key, MemoryFileTable::kAnySession));
  return AdoptEventCopy(*file);
}

// A StreamWaitEvent on an interprocess event of the backend that the test has
// recorded itself through HostIpcEvent (as a client process would) and
// completes in Open(). The destructor opens it, so no stream stays blocked.
class Gate {
 public:
  static absl::StatusOr<std::unique_ptr<Gate>> Create(DeviceBackend& backend, DeviceIndex device) {
    EventFlags flags;
    flags.interprocess = true;
    GPUMUX_ASSIGN_OR_RETURN(BackendEvent event, backend.CreateEvent(device, flags));
    GPUMUX_ASSIGN_OR_RETURN(std::string handle, backend.GetIpcEventHandle(event));
    GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<HostIpcEvent> ipc, OpenBackendEvent(backend, handle));
    const uint64_t generation = ipc->Record();
    return std::unique_ptr<Gate>(new Gate(backend, event, std::move(ipc), generation));
  }
  ~Gate() { Open(); }

  // Work queued on `stream` after this call waits for Open().
  absl::Status HoldBack(BackendStream stream) { return backend_.StreamWaitEvent(stream, event_); }
  void Open() { ipc_->Complete(generation_, 0); }

 private:
  Gate(DeviceBackend& backend, BackendEvent event, std::unique_ptr<HostIpcEvent> ipc,
       uint64_t generation)
      : backend_(backend), event_(event), ipc_(std::move(ipc)), generation_(generation) {}

  DeviceBackend& backend_;
  BackendEvent event_;
  std::unique_ptr<HostIpcEvent> ipc_;
  uint64_t generation_;
};

// Runs `call` on its own thread; true when it returns within `limit`. When it
// does not, `unblock` runs so that a hung call ends (and the test fails)
// instead of hanging the test binary.
inline bool ReturnsWithin(absl::Duration limit, const std::function<void()>& call,
                          const std::function<void()>& unblock) {
  absl::Notification returned;
  std::thread thread([&] {
    call();
    returned.Notify();
  });
  const bool in_time = returned.WaitForNotificationWithTimeout(limit);
  if (!in_time) unblock();
  thread.join();
  return in_time;
}

}  // namespace gpumux::testing
