#pragma once

// What a profile of a program (or of a live session) holds, as the client
// library records its side (host), the daemon its side (device) and the
// gpumux CLI reads both (`gpumux bottleneck`, `gpumux profile`). Times are
// CLOCK_MONOTONIC nanoseconds, which the client and the daemon share on one
// machine, so both sides lie on one timeline.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpumux {

// One call of a libgpumux API function (memory::Allocate, Stream::Synchronize,
// ...), as a span on the thread that made it.
struct HostCall {
  uint64_t call_id = 0;   // unique in its process; device work names it
  uint32_t function = 0;  // index into HostProfile::functions
  uint32_t thread = 0;    // the program's threads numbered 1, 2, ... as they first called
  uint32_t depth = 0;     // 0: called by the program; 1: by another API call; ...
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// One API function's totals over the profile, exact whatever spans were
// dropped (cProfile's columns).
struct HostFunction {
  std::string name;      // "memory::Allocate"
  uint64_t calls = 0;    // ncalls
  int64_t self_ns = 0;   // tottime: less the API calls it made
  int64_t total_ns = 0;  // cumtime: outermost calls of the function only
  bool waits = false;    // it blocks until device work completes (synchronize-like)
};

struct HostProfile {
  std::vector<HostFunction> functions;  // every function the library knows, called or not
  std::vector<HostCall> calls;          // the spans kept, by start
  uint64_t dropped_calls = 0;           // spans the ring had no room for
  uint64_t threads = 0;                 // threads that called
  int64_t start_ns = 0;                 // the profile's window
  int64_t end_ns = 0;
  int64_t library_ns = 0;  // time inside libgpumux: its outermost calls, every thread
  int64_t waiting_ns = 0;  // of that, in calls that wait for the device
};

// One piece of work the daemon ran for a session.
struct DeviceWorkRecord {
  std::string name;  // "copy host_to_device", "memset", "random normal", "all_reduce", ...
  uint64_t session = 0;
  int32_t device = 0;
  uint64_t stream = 0;   // the session's stream id (0: its default stream)
  uint64_t call_id = 0;  // the HostCall that queued it (0: not known)
  uint64_t bytes = 0;
  int64_t host_start_ns = 0;  // the daemon's handling of it
  int64_t host_end_ns = 0;
  // On the stream (timing events on CUDA, stream timestamps on the host
  // backend); both -1 when not measured (synchronize, work that failed).
  int64_t device_start_ns = -1;
  int64_t device_end_ns = -1;
};

// An NVTX range a session pushed (and popped: end_ns -1 while still open).
struct NvtxRangeRecord {
  std::string message;
  uint64_t session = 0;
  uint32_t depth = 0;  // 0: outermost on its thread
  int64_t start_ns = 0;
  int64_t end_ns = -1;
  uint64_t thread = 0;  // the client's thread that pushed it
};

struct DeviceProfile {
  std::vector<DeviceWorkRecord> work;   // by host_start_ns
  std::vector<NvtxRangeRecord> ranges;  // by start_ns
  uint64_t dropped_work = 0;
  uint64_t dropped_ranges = 0;
};

// A live session's profile for a while (`gpumux profile`): the daemon's
// side, and its client library's when it sent it.
struct SessionProfile {
  DeviceProfile device;
  std::optional<HostProfile> host;
  std::string host_missing;  // why `host` is empty
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Where the program ran, for the report's environment summary.
struct ProfileEnvironment {
  std::string gpumux_version;  // the CLI's ("0.1.0 (commit abc1234)")
  std::string daemon_version;  // the daemon's, as it reports it
  std::string build_type;      // "RelWithDebInfo"
  std::string compiler;        // "GCC 12.2.0"
  std::string os;              // "Debian GNU/Linux 12 (bookworm), Linux 6.1.0"
  std::string backend;         // "host", "cuda"
  std::vector<std::string>
      devices;  // one line each: "0: NVIDIA H200, 139.8 GiB, driver 580.x, runtime 13.0"
};

// Everything one report shows.
struct Profile {
  ProfileEnvironment environment;
  HostProfile host;
  DeviceProfile device;
  std::string program;  // the command line, or "session N" when attached
  int64_t wall_ns = 0;  // the program's wall time (the window when attached)
  std::string
      exit;  // "exited with status 0", "killed by signal 11 (Segmentation fault)"; "" attached
};

}  // namespace gpumux
