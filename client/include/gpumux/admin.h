#pragma once

// libgpumux's operator surface that changes the daemon's policy: tenant
// memory limits, ending sessions and emptying every session's cache
// (gpumux.v1.Admin), for the gpumux CLI's tenants, tenant-limit,
// kill-session and empty-cache. The daemon serves it on its admin socket, next to its
// Unix socket, and only to root and its own user (by the connection's peer credentials): anyone
// else gets PERMISSION_DENIED. It opens no session.
//
// Every call has a 30-second deadline and returns the daemon's status; when
// the daemon cannot be reached, UNAVAILABLE "cannot reach gpumuxd at
// <admin socket>: ...". Thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpumux/client_options.h"
#include "gpumux/common/default_address.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/profile_data.h"
#include "gpumux/tenant_info.h"

namespace gpumux {

class Admin {
 public:
  // The admin socket of the daemon at `address` ("unix:///path" or "/path":
  // the daemon's Unix socket; Admin is never served over TCP). Connects
  // lazily; a TCP address fails every call with INVALID_ARGUMENT.
  explicit Admin(absl::string_view address = DefaultAddress());
  ~Admin();
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  // "unix://<socket>.admin", or the address as given when it is not a Unix one.
  const std::string& address() const;

  // Caps the segments of all sessions of `tenant` together at `limit_bytes`
  // (nullopt: no cap) on `device`, or on every device when nullopt.
  // INVALID_ARGUMENT for a bad tenant name, a device out of range or a limit
  // of 0 bytes.
  absl::Status SetTenantLimit(const std::string& tenant, std::optional<uint64_t> limit_bytes,
                              std::optional<DeviceIndex> device = std::nullopt);
  // Every tenant with a limit or a session, by name, with its figures per device.
  absl::StatusOr<std::vector<TenantInfo>> ListTenants();
  // Ends `session` as if its client had died: the client's calls fail
  // UNAVAILABLE "session N was killed by an operator: <reason>", and all it
  // held is reclaimed before this returns. INVALID_ARGUMENT for session 0 or
  // a reason over 1024 bytes or with a control character; NOT_FOUND for a
  // session that is not open.
  absl::Status KillSession(SessionId session, const std::string& reason);
  // Profiles live session `session` for `duration`, any tenant's (as
  // Client::ProfileSession, which profiles only its own tenant's).
  absl::StatusOr<SessionProfile> ProfileSession(SessionId session, absl::Duration duration,
                                                uint64_t capacity = 0);
  // torch.cuda.empty_cache() for every session on `device` (every device
  // when nullopt): the daemon's caches and what local clients cache in their
  // processes (asked, and waited for up to gpumuxd's --client-reply-timeout).
  // INVALID_ARGUMENT for a device out of range.
  absl::StatusOr<ReleasedCache> EmptyCache(std::optional<DeviceIndex> device = std::nullopt);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux
