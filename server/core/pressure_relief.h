#pragma once

// PressureRelief: the retry policy for an allocation that finds the memory
// gone (the device full, or its tenant's limit reached) while other
// sessions' clients hold cached leases that could cover it. It asks those
// clients to return them (ClientQueries::ReleaseCached), waits for their
// answers up to a reply timeout, and lets the caller try once more; a
// refusal that stands is the caller's OOM, with PyTorch's text. Two steps,
// so that a transport can take the waiting off its own threads: Holders
// decides at once whether asking can help, AskAndRetry waits. Thread-safe.

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gpumux/common/ids.h"
#include "server/core/client_queries.h"
#include "server/core/memory_manager.h"

namespace gpumux {

class PressureRelief {
 public:
  // `memory` and `queries` must outlive this. A holder that does not answer
  // within `reply_timeout` is given up on (and left out of later reliefs
  // until its figures change: MemoryManager::AskToRelease).
  PressureRelief(MemoryManager* memory, ClientQueries* queries, absl::Duration reply_timeout)
      : memory_(memory), queries_(queries), reply_timeout_(reply_timeout) {}

  // After an allocation of `session` on `device` was refused with `refusal`:
  // the sessions worth asking (MemoryManager::PressureCandidates), or none
  // when asking cannot help — the refusal is not a shortage, is the
  // session's own limit (its relief is its own cache), or no other session
  // holds a cache there. Then the refusal stands, and with `count_oom` a
  // shortage counts once in the session's num_ooms. Does not block.
  std::vector<SessionId> Holders(SessionId session, DeviceIndex device, const absl::Status& refusal,
                                 bool count_oom);

  // Asks `holders` (from Holders) to return their cached leases on
  // `device`, waits until each answered, ended or the reply timeout passed,
  // then returns `retry()`. Blocks up to the reply timeout: call it where a
  // wait holds no thread another session needs.
  absl::StatusOr<AllocationView> AskAndRetry(
      DeviceIndex device, absl::Span<const SessionId> holders,
      absl::FunctionRef<absl::StatusOr<AllocationView>()> retry);

 private:
  MemoryManager* const memory_;
  ClientQueries* const queries_;
  const absl::Duration reply_timeout_;
};

}  // namespace gpumux
