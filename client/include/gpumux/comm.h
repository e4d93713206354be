#pragma once

// torch.cuda.comm for a Client's buffers: broadcast, reduce_add, scatter and
// gather across the daemon's devices (types in gpumux/comm_types.h).

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpumux/client.h"
#include "gpumux/comm_types.h"
#include "gpumux/common/ids.h"
#include "gpumux/copy_options.h"
#include "gpumux/stream.h"

namespace gpumux {
namespace comm {

// Across the daemon's devices, with PyTorch's argument rules and messages
// (the daemon's). Tensors are contiguous TensorRefs into this Client's
// buffers (gpumux/comm_types.h); results are new allocations the
// ResultTensors own, or the caller's own memory where PyTorch returns an
// input itself. Work is queued on the calling thread's current stream of
// each device taking part (options.streams names others) and each call
// returns once it is queued (options.wait: completed). Bad memory is
// NOT_FOUND or OUT_OF_RANGE; a stream of another Client INVALID_ARGUMENT.
//
// comm.broadcast(tensor, devices): one result per device, the input
// itself on its own device.
absl::StatusOr<CollectiveResult> Broadcast(Client& client, const TensorRef& tensor,
                                           absl::Span<const int64_t> devices,
                                           const CollectiveOptions& options = {});
// comm.broadcast(tensor, out=out): copies into every `out` tensor.
absl::StatusOr<CollectiveResult> BroadcastOut(Client& client, const TensorRef& tensor,
                                              absl::Span<const TensorRef> out,
                                              const CollectiveOptions& options = {});
// comm.broadcast_coalesced(tensors, devices, buffer_size): results device
// by device (devices.size() × tensors.size(); devices[0]'s are the inputs).
absl::StatusOr<CollectiveResult> BroadcastCoalesced(
    Client& client, absl::Span<const TensorRef> tensors, absl::Span<const int64_t> devices,
    uint64_t buffer_size = kDefaultCoalescedBufferSize, const CollectiveOptions& options = {});
// comm.reduce_add(inputs, destination): the sum on `destination` (absent:
// the current device); a single input is returned as is.
absl::StatusOr<CollectiveResult> ReduceAdd(Client& client, absl::Span<const TensorRef> inputs,
                                           std::optional<DeviceIndex> destination = std::nullopt,
                                           const CollectiveOptions& options = {});
// comm.reduce_add_coalesced(inputs, destination, buffer_size): `inputs`
// holds one list per device; one new result per tensor of a list.
absl::StatusOr<CollectiveResult> ReduceAddCoalesced(
    Client& client, absl::Span<const std::vector<TensorRef>> inputs,
    std::optional<DeviceIndex> destination = std::nullopt,
    uint64_t buffer_size = kDefaultCoalescedBufferSize, const CollectiveOptions& options = {});
// comm.scatter(tensor, devices, chunk_sizes, dim, streams): one result per
// chunk; a chunk that stays on the tensor's device and is contiguous is a
// view of it. streams[i] (if given and set) copies chunk i: INVALID_ARGUMENT
// "Expected the device associated with the stream at index i (was X) to
// match the device supplied at that index (expected Y)" (checked here).
absl::StatusOr<CollectiveResult> Scatter(
    Client& client, const TensorRef& tensor, absl::Span<const int64_t> devices,
    const std::optional<std::vector<int64_t>>& chunk_sizes = std::nullopt, int64_t dim = 0,
    absl::Span<const std::optional<Stream>> streams = {}, const CollectiveOptions& options = {});
// comm.scatter(tensor, dim=dim, streams=streams, out=out).
absl::StatusOr<CollectiveResult> ScatterOut(Client& client, const TensorRef& tensor,
                                            absl::Span<const TensorRef> out, int64_t dim = 0,
                                            absl::Span<const std::optional<Stream>> streams = {},
                                            const CollectiveOptions& options = {});
// comm.gather(tensors, dim, destination): a new tensor on `destination`
// (absent: the current device).
absl::StatusOr<CollectiveResult> Gather(Client& client, absl::Span<const TensorRef> tensors,
                                        int64_t dim = 0,
                                        std::optional<DeviceIndex> destination = std::nullopt,
                                        const CollectiveOptions& options = {});
// comm.gather(tensors, dim, destination="cpu"): the gathered bytes into
// `dst` (`dst_size` bytes, exactly the result's); returns once they are
// there. Inline or through the staging buffer as options.path chooses
// for copies (TransferPath::kAuto by size). Its one result tensor has no
// buffer: it tells the gathered shape.
absl::StatusOr<CollectiveResult> GatherToHost(Client& client, absl::Span<const TensorRef> tensors,
                                              void* dst, uint64_t dst_size, int64_t dim = 0,
                                              const CollectiveOptions& options = {},
                                              TransferPath path = TransferPath::kAuto);
// comm.gather(tensors, dim, out=out).
absl::StatusOr<CollectiveResult> GatherOut(Client& client, absl::Span<const TensorRef> tensors,
                                           const TensorRef& out, int64_t dim = 0,
                                           const CollectiveOptions& options = {});

}  // namespace comm
}  // namespace gpumux
