#pragma once

// Option and result structs of the Client API (client/client.h), kept apart
// so they can be default arguments there.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "common/ids.h"

namespace gpumux {

struct ClientOptions {
  // The session's client name; empty: this process's name (/proc/self/comm).
  std::string client_name;
  // Sessions of one tenant share segments; empty: the session is its own tenant.
  std::string tenant;
  // Free-form labels, e.g. Kubernetes pod and namespace.
  std::map<std::string, std::string> labels;
  // How long Connect waits for the daemon to accept the connection and open
  // the session.
  absl::Duration open_timeout = absl::Seconds(5);
  // How long a free waits for others to join its batch before a background
  // thread sends it, unless a request of the client carries it first.
  // absl::InfiniteDuration(): frees leave only with the client's requests.
  absl::Duration free_batch_delay = absl::Milliseconds(1);
};

struct AllocateOptions {
  // Gives the allocation a segment of its own, so that Share exposes nothing
  // else (needed for Share).
  bool shareable = false;
  // 0: the session's default stream on the device.
  StreamId stream;
};

struct EmptyCacheOptions {
  // Absent: every device.
  std::optional<DeviceIndex> device;
  // Release the cached segments of every session, not just this one's (an
  // operator's action).
  bool all_sessions = false;
};

struct ReleasedCache {
  uint64_t released_bytes = 0;
  uint64_t released_segments = 0;
};

}  // namespace gpumux
