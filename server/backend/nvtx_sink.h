#pragma once

// NvtxSink: where the daemon sends its sessions' NVTX marks and ranges, so a
// profiler attached to gpumuxd (nsys, Nsight) shows them on its timeline. The
// CUDA build forwards to NVTX3 (Nvtx3Sink); without CUDA nothing is sent.
// Ranges are start/end ranges, not a thread's push/pop stack: a session's
// calls arrive on any of gRPC's threads. Implementations are thread-safe.

#include <cstdint>

#include "absl/strings/string_view.h"
#include "gpumux/common/ids.h"

namespace gpumux {

class NvtxSink {
 public:
  virtual ~NvtxSink() = default;
  virtual void Mark(SessionId session, absl::string_view message) = 0;
  // Returns the id that ends the range.
  virtual uint64_t RangeStart(SessionId session, absl::string_view message) = 0;
  virtual void RangeEnd(uint64_t range) = 0;
};

}  // namespace gpumux
