#include "gpumux/nvtx.h"

#include <unistd.h>

#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "spdlog/spdlog.h"

namespace gpumux::nvtx {
namespace {

// The daemon's key for the calling thread's stack.
uint64_t ThisThread() { return static_cast<uint64_t>(gettid()); }

}  // namespace

absl::Status Mark(Client& client, absl::string_view message) {
  GPUMUX_PROFILED("nvtx::Mark");
  auto& impl = ImplOf(client);
  v1::NvtxMessage request;
  request.set_message(std::string(message));
  request.set_thread(ThisThread());
  v1::NvtxMarkResponse response;
  return impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.nvtx_stub_->Mark(context, request, &response);
  });
}

absl::StatusOr<int> RangePush(Client& client, absl::string_view message) {
  GPUMUX_PROFILED("nvtx::RangePush");
  auto& impl = ImplOf(client);
  v1::NvtxMessage request;
  request.set_message(std::string(message));
  request.set_thread(ThisThread());
  v1::NvtxDepth response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.nvtx_stub_->RangePush(context, request, &response);
  }));
  return response.depth();
}

absl::StatusOr<int> RangePop(Client& client) {
  GPUMUX_PROFILED("nvtx::RangePop");
  auto& impl = ImplOf(client);
  v1::NvtxRangePopRequest request;
  request.set_thread(ThisThread());
  v1::NvtxDepth response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.nvtx_stub_->RangePop(context, request, &response);
  }));
  return response.depth();
}

Range::Range(Client& client, absl::string_view message)
    : client_(client), depth_(RangePush(client, message)) {}

Range::~Range() {
  if (!depth_.ok()) return;
  if (absl::StatusOr<int> popped = RangePop(client_); !popped.ok()) {
    spdlog::warn("gpumux: nvtx range_pop at the end of a range failed: {}",
                 popped.status().ToString());
  }
}

}  // namespace gpumux::nvtx
