#pragma once

// ClientQueries: what the daemon asks of the clients of sessions that
// allocate locally, over their session streams, and their answers: "return
// your wholly free cached leases on this device" (memory pressure) and "list
// the blocks in your leases" (a snapshot someone else asked for). Every
// question is answered or given up on by a deadline: a client that is
// stopped, hung or hostile delays the asker by at most that much, and a
// session that ends stops counting as pending at once. A session that let
// a question pass its deadline is not waited for again until it answers
// something (late answers count), so a stalled client costs one deadline,
// not one per question. Answers are matched
// by (request id, session), so a client can only answer what it was asked.
// A client's complete list of its blocks serves the snapshots that follow
// within `answer_reuse` while its figures show no allocation or free since,
// and one blocks question is out at a time (later askers wait for it and
// use its answers): snapshots in a loop, which anyone reaching the observe
// port may ask for, cost a busy client one answer per `answer_reuse`, not
// one per snapshot. Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "allocator/caching_allocator.h"
#include "gpumux/common/ids.h"
#include "server/core/session_registry.h"

namespace gpumux {

class ClientQueries {
 public:
  // Most segments one answer to a blocks question may list in all (its
  // messages together); past it the answer is dropped as malformed.
  static constexpr size_t kMaxAnswerSegments = 1 << 16;
  // Most blocks one answer may list in all.
  static constexpr size_t kMaxAnswerBlocks = 1 << 22;

  // `sessions` must outlive this.
  explicit ClientQueries(const SessionRegistry* sessions,
                         absl::Duration answer_reuse = absl::ZeroDuration())
      : sessions_(sessions), answer_reuse_(answer_reuse) {}

  // Asks each of `sessions` to return its wholly free cached leases on
  // `device` and waits until each answered or ended, or until `deadline`.
  // Returns how many answered.
  size_t ReleaseCached(absl::Span<const SessionId> sessions, DeviceIndex device,
                       absl::Time deadline);

  // What a blocks question got.
  struct LeaseBlocksAnswers {
    // Per session that answered completely and within the bounds above, the
    // segments it listed (device, address and blocks only: nothing else in
    // them is read).
    absl::flat_hash_map<SessionId, std::vector<SegmentSnapshot>> blocks;
    // Why a session has none where it is not that its client did not answer
    // by the deadline: "was not asked: ..." or "answered too much: ...".
    absl::flat_hash_map<SessionId, std::string> missing;
  };
  // Asks each of `sessions` for the blocks of its leases and waits as
  // ReleaseCached does. A session that answered completely within
  // `answer_reuse`, when `version` (a figure that changes with each of its
  // allocations and frees, MemoryManager::BlocksVersion) is as it was then,
  // is not asked again: that answer serves. Call without locks `version`
  // takes.
  LeaseBlocksAnswers LeaseBlocks(absl::Span<const SessionId> sessions, absl::Time deadline,
                                 absl::FunctionRef<uint64_t(SessionId)> version);

  // A client's answers, from its session stream. Answers nobody waits for
  // (late, repeated, never asked) are dropped, but show the client alive.
  void OnCacheReleased(SessionId session, uint64_t request);
  // One message of an answer; `last` completes it.
  void OnLeaseBlocks(SessionId session, uint64_t request, std::vector<SegmentSnapshot> segments,
                     bool last);
  // The session ended: nothing it was asked is pending any more.
  void OnSessionClosed(SessionId session);

 private:
  struct Pending {
    absl::flat_hash_set<SessionId> waiting;  // asked, not answered, not ended
    size_t answered = 0;
    // For a blocks question: the answers so far, complete or not.
    absl::flat_hash_map<SessionId, std::vector<SegmentSnapshot>> blocks;
    absl::flat_hash_map<SessionId, size_t> block_counts;
    // Sessions without an answer for another reason than time, and why.
    absl::flat_hash_map<SessionId, std::string> missing;
  };

  // Registers a question to `sessions`, asks each through `ask` (skipping
  // sessions that are gone) and waits; returns the question's final state.
  template <typename Ask>
  Pending AskAndWait(absl::Span<const SessionId> sessions, absl::Time deadline, Ask ask);

  const SessionRegistry* sessions_;
  const absl::Duration answer_reuse_;
  absl::Mutex mu_;
  // The last complete blocks answer of each session, and when it came.
  struct Answered {
    std::vector<SegmentSnapshot> segments;
    absl::Time at;
    uint64_t version = 0;  // the session's BlocksVersion when asked
  };
  absl::flat_hash_map<SessionId, Answered> answered_ ABSL_GUARDED_BY(mu_);
  bool blocks_question_out_ ABSL_GUARDED_BY(mu_) = false;
  // Sessions that let a question pass its deadline and have not answered
  // anything since: neither asked nor waited for.
  absl::flat_hash_set<SessionId> unresponsive_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  // Node-based: an asker waits on its entry by reference while others ask
  // and insert theirs.
  absl::node_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
};

// Fills the leased segments of `segments` (a snapshot of the daemon's own
// books) with the blocks their sessions' clients listed in `answers`
// (ClientQueries::LeaseBlocks), after checking that the blocks tile the
// segment exactly, in address order, each a multiple of 512 bytes with a
// known state and a requested size within it. The segment's allocated,
// active and requested sizes are summed here from the blocks, never taken
// from the client. A leased segment without a usable answer gets
// `blocks_unavailable`, which says why (`timeout` is how long the clients
// were given), and one block of unknown state spanning it.
void FillLeaseBlocks(const ClientQueries::LeaseBlocksAnswers& answers, absl::Duration timeout,
                     std::vector<SegmentSnapshot>& segments);

}  // namespace gpumux
