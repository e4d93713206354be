#pragma once

// gpumux.v1.Nvtx: a thin adapter from the wire to NvtxRanges.

#include "gpumux/v1/nvtx.grpc.pb.h"
#include "server/core/nvtx_ranges.h"
#include "server/core/session_registry.h"

namespace gpumux {

class NvtxService final : public v1::Nvtx::CallbackService {
 public:
  // Both must outlive the service.
  NvtxService(NvtxRanges* ranges, const SessionRegistry* sessions)
      : ranges_(ranges), sessions_(sessions) {}

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
};

}  // namespace gpumux
