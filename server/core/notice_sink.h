#pragma once

// NoticeSink: how the core tells one session's client something without
// knowing the transport (the rpc layer implements it over the session stream).

#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/ids.h"

namespace gpumux {

class NoticeSink {
 public:
  virtual ~NoticeSink() = default;
  // The daemon returned a segment this session was handed: the client should
  // unmap it. Must not block; may be called from any thread.
  virtual void SegmentReleased(DeviceIndex device, SegmentId segment) = 0;
  // Questions to a client that allocates locally (ClientQueries): return the
  // wholly free cached leases on `device`, and list the blocks of its
  // leases. The answers come back to ClientQueries under `request`. Must not
  // block.
  virtual void AskReleaseCached(uint64_t request, DeviceIndex device) = 0;
  virtual void AskLeaseBlocks(uint64_t request) = 0;
  // The daemon is ending the session (shutdown): end the transport's side of
  // it with UNAVAILABLE and `reason`. Must not block.
  virtual void Terminate(absl::string_view reason) = 0;
};

}  // namespace gpumux
