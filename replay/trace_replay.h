#pragma once

// Replays a recorded PyTorch allocation trace (../shared/traces format, also
// under testdata/) through an allocator: in-process through CachingAllocator,
// or through a running daemon via the client library. Reports PyTorch's
// figures (peak requested / allocated / reserved, cudaMalloc calls) and speed.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

struct TraceEvent {
  enum class Action { kAlloc, kFree };
  Action action;
  uint64_t addr = 0;  // the address PyTorch returned: the event's key
  uint64_t size = 0;  // requested bytes (alloc only)
  uint64_t stream = 0;
};

// Reads a gzip CSV with header "action,addr,size,stream". Keeps `alloc` and
// `free_completed` (as kFree); drops frees of addresses never allocated in
// the trace and the other actions. NOT_FOUND / INVALID_ARGUMENT on unreadable
// or malformed files, naming the line.
absl::StatusOr<std::vector<TraceEvent>> LoadTrace(absl::string_view path);

// Where a replay sends its operations. Handles are the target's own ids.
class ReplayTarget {
 public:
  virtual ~ReplayTarget() = default;
  virtual absl::StatusOr<uint64_t> Allocate(uint64_t size, uint64_t stream) = 0;
  virtual absl::Status Free(uint64_t handle) = 0;
  // Finishes outstanding work and returns torch.cuda.memory_stats() keys.
  virtual absl::StatusOr<std::map<std::string, int64_t>> Stats() = 0;
};

struct ReplayResult {
  int64_t peak_requested = 0;  // requested_bytes.all.peak
  int64_t peak_allocated = 0;  // allocated_bytes.all.peak
  int64_t peak_reserved = 0;   // reserved_bytes.all.peak
  int64_t device_allocs = 0;   // num_device_alloc ("cudaMalloc calls"; page maps)
  int64_t device_frees = 0;    // num_device_free (cudaFree calls; page unmaps)
  int64_t operations = 0;      // allocs + frees replayed
  double seconds = 0;          // wall time of the replay loop alone
};

// Replays `events` in order; `repeat` > 1 runs the loop again (freeing what is
// live between rounds) to time more operations; peaks come from round one.
absl::StatusOr<ReplayResult> Replay(const std::vector<TraceEvent>& events, ReplayTarget& target,
                                    int repeat = 1);

// name=value lines, ending with peak_requested, peak_reserved,
// reserved_over_requested and ops_per_second (the required last lines).
std::string FormatReplayResult(const ReplayResult& result);

}  // namespace gpumux
