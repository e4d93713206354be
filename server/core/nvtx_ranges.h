#pragma once

// NvtxRanges: torch.cuda.nvtx per session. range_push returns the depth of the
// range it started (0-based), range_pop the depth of the range it ended; a pop
// with nothing open is FAILED_PRECONDITION, not a crash. Every mark, push and
// pop is kept with its time stamp for the session's profile (bounded: the
// oldest records go first). Books exist from AddSession to RemoveSession;
// calls for a session not added are UNAUTHENTICATED and keep nothing. With
// an NvtxSink (the CUDA build's NVTX3), marks and ranges also reach a
// profiler attached to the daemon; ranges still open when the session ends
// are ended then. Thread-safe.

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
#include "common/ids.h"
#include "server/backend/nvtx_sink.h"

namespace gpumux {

struct NvtxRecord {
  enum class Kind { kMark, kPush, kPop };
  Kind kind;
  std::string message;  // the range's message for kPop
  int depth = 0;
  absl::Time time;
};

class NvtxRanges {
 public:
  // Messages longer than this are INVALID_ARGUMENT; sessions keep this many records.
  static constexpr size_t kMaxMessageBytes = 4096;
  static constexpr size_t kMaxRecords = 65536;
  static constexpr size_t kMaxDepth = 1024;

  // `sink` (may be null) must outlive this object.
  explicit NvtxRanges(NvtxSink* sink = nullptr) : sink_(sink) {}

  void AddSession(SessionId session);
  absl::Status Mark(SessionId session, absl::string_view message);
  absl::StatusOr<int> Push(SessionId session, absl::string_view message);
  absl::StatusOr<int> Pop(SessionId session);

  // The open ranges, outermost first, and the records so far.
  std::vector<std::string> OpenRanges(SessionId session) const;
  std::vector<NvtxRecord> Records(SessionId session) const;
  void RemoveSession(SessionId session);

 private:
  struct Books {
    std::vector<std::string> stack;
    // The sink's id of each open range (only with a sink).
    std::vector<uint64_t> sink_ranges;
    std::deque<NvtxRecord> records;
  };
  void AddLocked(Books& books, NvtxRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Books*> BooksLocked(SessionId session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  NvtxSink* const sink_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SessionId, Books> books_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
