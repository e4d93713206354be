#pragma once

// NvtxRanges: torch.cuda.nvtx per session. Ranges nest per thread of the
// client, as PyTorch's do: each call names its thread (the client's own
// number for it; 0 for callers that do not say, which share one stack).
// range_push returns the depth of the range it started on the thread
// (0-based), range_pop the depth of the range it ended; a pop with nothing
// open on the thread is FAILED_PRECONDITION, not a crash. Every mark, push
// and pop is kept with its time stamp for the session's profile (bounded:
// the oldest records go first). Books exist from AddSession to
// RemoveSession; calls for a session not added are UNAUTHENTICATED and keep
// nothing. With an NvtxSink (the CUDA build's NVTX3), marks and ranges also
// reach a profiler attached to the daemon; ranges still open when the
// session ends are ended then. Thread-safe.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpumux/common/ids.h"
#include "server/backend/nvtx_sink.h"

namespace gpumux {

// A client's thread, as it numbers its threads.
using NvtxThread = uint64_t;

struct NvtxRecord {
  enum class Kind { kMark, kPush, kPop };
  Kind kind;
  std::string message;  // the range's message for kPop
  int depth = 0;        // on its thread
  absl::Time time;
  NvtxThread thread = 0;
};

class NvtxRanges {
 public:
  // Messages longer than this are INVALID_ARGUMENT; sessions keep this many
  // records. A thread nests at most kMaxDepth ranges, and a session's threads
  // keep at most kMaxOpenRanges open in all (a message is up to 4 KiB).
  static constexpr size_t kMaxMessageBytes = 4096;
  static constexpr size_t kMaxRecords = 65536;
  static constexpr size_t kMaxDepth = 1024;
  static constexpr size_t kMaxOpenRanges = 4096;

  // `sink` (may be null) must outlive this object.
  explicit NvtxRanges(NvtxSink* sink = nullptr) : sink_(sink) {}

  void AddSession(SessionId session);
  absl::Status Mark(SessionId session, NvtxThread thread, absl::string_view message);
  absl::StatusOr<int> Push(SessionId session, NvtxThread thread, absl::string_view message);
  absl::StatusOr<int> Pop(SessionId session, NvtxThread thread);

  // The thread's open ranges, outermost first, and the session's records so far.
  std::vector<std::string> OpenRanges(SessionId session, NvtxThread thread) const;
  std::vector<NvtxRecord> Records(SessionId session) const;
  void RemoveSession(SessionId session);

 private:
  struct Stack {
    std::vector<std::string> messages;
    // The sink's id of each open range (only with a sink).
    std::vector<uint64_t> sink_ranges;
  };
  struct Books {
    // Threads with open ranges only: a stack emptied goes.
    absl::flat_hash_map<NvtxThread, Stack> stacks;
    size_t open = 0;  // ranges open on all threads
    std::deque<NvtxRecord> records;
  };
  void AddLocked(Books& books, NvtxRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Books*> BooksLocked(SessionId session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  NvtxSink* const sink_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SessionId, Books> books_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
