#pragma once

// gpumux.v1.Nvtx: a thin adapter from the wire to NvtxRanges.

#include "gpumux/v1/nvtx.grpc.pb.h"
#include "server/core/device_profiler.h"
#include "server/core/nvtx_ranges.h"
#include "server/core/session_registry.h"

namespace gpumux {

class NvtxService final : public v1::Nvtx::CallbackService {
 public:
  // All must outlive the service; ranges of profiled sessions also go to
  // `profiler` (may be null).
  NvtxService(NvtxRanges* ranges, const SessionRegistry* sessions,
              DeviceProfiler* profiler = nullptr)
      : ranges_(ranges), sessions_(sessions), profiler_(profiler) {}

  grpc::ServerUnaryReactor* Mark(grpc::CallbackServerContext* context,
                                 const v1::NvtxMessage* request,
                                 v1::NvtxMarkResponse* response) override;
  grpc::ServerUnaryReactor* RangePush(grpc::CallbackServerContext* context,
                                      const v1::NvtxMessage* request,
                                      v1::NvtxDepth* response) override;
  grpc::ServerUnaryReactor* RangePop(grpc::CallbackServerContext* context,
                                     const v1::NvtxRangePopRequest* request,
                                     v1::NvtxDepth* response) override;

 private:
  NvtxRanges* ranges_;
  const SessionRegistry* sessions_;
  DeviceProfiler* profiler_;
};

}  // namespace gpumux
