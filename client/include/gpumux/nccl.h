#pragma once

// torch.cuda.nccl for a Client's buffers: all_reduce across the daemon's
// devices, with the argument rules and queueing of gpumux/comm.h.

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpumux/client.h"
#include "gpumux/comm_types.h"
#include "gpumux/common/reduce_op.h"

namespace gpumux {
namespace nccl {

// torch.cuda.nccl.all_reduce(tensors, op=op): in place, one tensor per
// device ("inputs must be on unique devices").
absl::StatusOr<CollectiveResult> AllReduce(Client& client, absl::Span<const TensorRef> tensors,
                                           ReduceOp op = ReduceOp::kSum,
                                           const CollectiveOptions& options = {});
// torch.cuda.nccl.all_reduce(inputs, outputs, op).
absl::StatusOr<CollectiveResult> AllReduceOut(Client& client, absl::Span<const TensorRef> inputs,
                                              absl::Span<const TensorRef> outputs,
                                              ReduceOp op = ReduceOp::kSum,
                                              const CollectiveOptions& options = {});

}  // namespace nccl
}  // namespace gpumux
