#pragma once

// Option and result structs of the Client API (gpumux/client.h), kept apart
// so they can be default arguments there.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "gpumux/channel_security.h"
#include "gpumux/common/ids.h"
#include "gpumux/local_streams.h"
#include "gpumux/stream.h"

namespace gpumux {

// Where allocations run (docs/design.md, "Local allocation").
enum class AllocationMode {
  // GPUMUX_ALLOCATION=daemon|local in the environment; unset or empty:
  // kLocal. Connect fails INVALID_ARGUMENT for any other value.
  kDefault,
  // Every Allocate and free is a request to the daemon.
  kDaemon,
  // The client runs PyTorch's caching allocator itself over segments it
  // leases from the daemon: a cached allocation costs no round trip.
  // Shareable allocations still come from the daemon. Needs a Unix address
  // (the daemon's machine); over TCP the client allocates through the
  // daemon.
  kLocal,
};

struct ClientOptions {
  // The session's client name; empty: $GPUMUX_CLIENT_NAME where set and
  // non-empty, else this process's name (/proc/self/comm).
  std::string client_name;
  // Groups sessions for operators (gpumux sessions, Observe) and under one
  // tenant memory limit for all of them together (gpumuxd
  // --tenant-memory-limit, gpumux tenant-limit); segments are never shared
  // between sessions, of one tenant or not. Empty: $GPUMUX_TENANT where set
  // and non-empty, else the session is its own tenant.
  std::string tenant;
  // Free-form labels. The keys pod, namespace and container are the
  // session's Kubernetes identity (/metrics, gpumux top). Joined with
  // $GPUMUX_LABELS, comma-separated KEY=VALUE pairs (values hold no comma;
  // blanks around pairs are dropped), which a pod sets from the downward
  // API; a key given here wins. Connect fails INVALID_ARGUMENT for a pair
  // without '=' or with an empty key.
  std::map<std::string, std::string> labels;
  // How long Connect waits for the daemon to accept the connection and open
  // the session.
  absl::Duration open_timeout = absl::Seconds(5);
  // How long a free waits for others to join its batch before a background
  // thread sends it, unless a request of the client carries it first.
  // absl::InfiniteDuration(): frees leave only with the client's requests.
  absl::Duration free_batch_delay = absl::Milliseconds(1);
  // Bytes of the session's staging buffer, asked for on the first staged
  // copy (the daemon rounds up to 2 MiB). Staged copies move at most this
  // much per round trip.
  uint64_t staging_buffer_size = uint64_t{16} << 20;
  // Host copies with TransferPath::kAuto go inline up to this many bytes and
  // through the staging buffer above. On the host backend bytes in gRPC
  // messages move at a few hundred MB/s and staged ones at GB/s, while a
  // staged copy that returns before it ran costs one more round trip (its
  // completion event's destruction): around 64 KiB the two break even.
  uint64_t max_inline_copy = uint64_t{64} << 10;
  AllocationMode allocation = AllocationMode::kDefault;
  // TLS and the bearer token for a TCP address (empty fields: their
  // GPUMUX_TLS_* and GPUMUX_AUTH_TOKEN_FILE environment variables); a Unix
  // address ignores it. Over TCP nothing is mapped into this process:
  // DeviceBuffer::data() is null and host copies go inline in the messages.
  ChannelSecurity security;
  // The streams this process's own device work runs on, by which local
  // allocation orders the reuse of memory (local_streams.h). Null: its CUDA
  // streams on a CUDA daemon (CUDA builds), streams that are always idle on
  // the host backend. Host streams that lag (HostLocalStreams) emulate a
  // GPU running behind the CPU: what `gpumux replay --emulate-gpu-lag` and
  // the tests give.
  std::shared_ptr<LocalStreams> local_streams;
};

struct AllocateOptions {
  // Gives the allocation a segment of its own, so that Share exposes nothing
  // else (needed for Share).
  bool shareable = false;
  // The stream the block is allocated for (PyTorch's caching allocator
  // reuses blocks per stream); it must be on the allocation's device.
  // Absent: the calling thread's current stream of that device.
  std::optional<Stream> stream;
  // The stream of this process the block's work runs on, whose pool serves
  // it in local allocation mode (PyTorch passes its current CUDA stream):
  // the block is reused on that stream at once after it is freed. Absent:
  // the calling thread's current CUDA stream (SetCurrentCudaStream) on a
  // CUDA daemon; on the host backend, the gpumux stream above (its id).
  std::optional<LocalStream> local_stream;
};

struct EmptyCacheOptions {
  // Absent: every device.
  std::optional<DeviceIndex> device;
  // Release the cached segments of every session, not just this one's: an
  // operator's action, served on the daemon's admin socket (Admin::EmptyCache)
  // to root and gpumuxd's own user only; PERMISSION_DENIED for anyone else,
  // INVALID_ARGUMENT over TCP.
  bool all_sessions = false;
};

struct ReleasedCache {
  uint64_t released_bytes = 0;
  uint64_t released_segments = 0;
};

// What Client::IpcCollect unmapped.
struct CollectedMappings {
  uint64_t mappings = 0;
  uint64_t bytes = 0;
};

}  // namespace gpumux
