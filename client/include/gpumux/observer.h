#pragma once

// libgpumux's read-only view of a daemon, for operators and their tools (the
// gpumux CLI's devices, stats, summary, snapshot, sessions and groups): the
// Device and Observe services, and Group.ListGroups. It opens no session, so it also works against
// the daemon's read-only TCP listener, and the daemon's books do not change by looking at them.
//
// Every call has a 30-second deadline (an observe call that takes longer
// means a wedged daemon) and returns the daemon's status; when the daemon
// cannot be reached, UNAVAILABLE "cannot reach gpumuxd at <address>: ...".
// Thread-safe.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpumux/channel_security.h"
#include "gpumux/common/default_address.h"
#include "gpumux/common/ids.h"
#include "gpumux/device_properties.h"
#include "gpumux/group_types.h"
#include "gpumux/memory_snapshot.h"
#include "gpumux/session_info.h"

namespace gpumux {

class Observer {
 public:
  // A view of the daemon at `address` ("unix:///path", "/path" or
  // "host:port"), over TLS with a token as `security` says for a TCP address
  // (empty fields: their environment variables; see ChannelSecurity).
  // Connects lazily: an unreachable daemon shows on the first call, as does
  // bad security (every call INVALID_ARGUMENT naming the file).
  explicit Observer(absl::string_view address = DefaultAddress(),
                    const ChannelSecurity& security = ChannelSecurity());
  ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  const std::string& address() const;

  // Every device's properties, by index (Device.ListDevices).
  absl::StatusOr<std::vector<DeviceProperties>> ListDevices();
  // The live sessions, by id.
  absl::StatusOr<std::vector<SessionInfo>> ListSessions();
  // The groups of daemons this daemon is in, by name (Group.ListGroups;
  // served on the Unix socket and in TCP full mode).
  absl::StatusOr<std::vector<DaemonGroupInfo>> ListGroups();
  // torch.cuda.memory_stats(device) of the whole device, or of one session on
  // it: PyTorch's 122 keys. NOT_FOUND for a session that does not exist;
  // INVALID_ARGUMENT for a device out of range.
  absl::StatusOr<std::map<std::string, int64_t>> MemoryStats(
      DeviceIndex device, std::optional<SessionId> session = std::nullopt);
  // torch.cuda.memory_summary(device, abbreviated) of the device or a session.
  absl::StatusOr<std::string> MemorySummary(DeviceIndex device,
                                            std::optional<SessionId> session = std::nullopt,
                                            bool abbreviated = false);
  // torch.cuda.memory_snapshot() of every device (or one), of every session
  // (or one), sorted by (device, address).
  absl::StatusOr<std::vector<SegmentInfo>> MemorySnapshot(
      std::optional<DeviceIndex> device = std::nullopt,
      std::optional<SessionId> session = std::nullopt);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux
