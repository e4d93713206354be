#pragma once

// Nvtx3Sink: NvtxSink on NVTX3 (header-only, from the CUDA toolkit), in the
// domain "gpumux", each message prefixed with "session N: ". Costs nothing
// measurable until a profiler injects itself.

#include "server/backend/nvtx_sink.h"

namespace gpumux {

class Nvtx3Sink final : public NvtxSink {
 public:
  Nvtx3Sink();
  void Mark(SessionId session, absl::string_view message) override;
  uint64_t RangeStart(SessionId session, absl::string_view message) override;
  void RangeEnd(uint64_t range) override;

 private:
  void* domain_;  // nvtxDomainHandle_t
};

}  // namespace gpumux
