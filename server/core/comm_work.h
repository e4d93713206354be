#pragma once

// CommWork: torch.cuda.comm across the daemon's devices, for one session at
// a time: broadcast, broadcast_coalesced, reduce_add, reduce_add_coalesced,
// scatter, gather and all_reduce, with PyTorch's argument rules and
// messages (torch/nn/parallel/comm.py, torch/csrc/cuda/comm.cpp and nccl.cpp).
//
// Tensors are contiguous and row-major, described by memory (an allocation
// of the session, or a lease and an offset for local memory), dtype and
// shape. Results land in memory the caller names or in new allocations of
// the session, as PyTorch returns new tensors; where PyTorch returns an
// input itself (broadcast to its own device, a one-input reduce_add, a
// scatter chunk that stays on its device and is contiguous), so does this.
//
// Each call is planned first (a CommPlan: every check, so a refused call
// queued nothing), then queued on the session's streams, one per device
// taking part: its stream in CommOptions::streams, else its default stream.
// The streams first meet (each waits for the others' work queued so far),
// then every device's part runs on its own stream (copies into a device on
// that device's stream, reductions on the destination's), and they meet
// again, so that the completion event (on the first device's stream) covers
// all of it and each allocation's record_stream on its device's stream
// protects it until every part that touched it has run. Reductions read
// other devices' memory directly where the backend can (CanReadPeer), else
// copy it over first. Where the backend has a CollectiveEngine (NCCL on
// CUDA), broadcast, broadcast_coalesced, reduce_add, reduce_add_coalesced
// and all_reduce over distinct devices are one engine call each between the
// two meetings, as PyTorch sends them to NCCL when nccl.is_available.
// Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor/reduce.h"
#include "common/tensor/rng_fill.h"
#include "common/tensor/tensor_chunks.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"
#include "server/core/comm_plan.h"
#include "server/core/comm_rules.h"
#include "server/core/comm_tensor.h"
#include "server/core/device_profiler.h"
#include "server/core/memory_manager.h"
#include "server/core/staging_buffers.h"
#include "server/core/stream_manager.h"

namespace gpumux {

struct CommResult {
  CommTensor tensor;
  // Set when the result is a new allocation of the session (tensor.id).
  std::optional<AllocationView> allocation;
};

struct CommOptions {
  // The session's stream for a device's part; devices not named use their
  // default stream. A stream on another device is INVALID_ARGUMENT.
  std::vector<std::pair<DeviceIndex, StreamId>> streams;
  bool wait = false;  // return once everything completed
  bool completion_event = false;
  // A group collective returns once queued (GroupWork) rather than done;
  // the within-node ones always do unless `wait`.
  bool async_op = false;
};

struct CommDone {
  std::vector<CommResult> results;       // each call says in which order
  std::optional<CompletionEvent> event;  // when asked for
  DeviceIndex event_device;              // whose stream recorded it
};

// Where gather's result goes.
struct GatherDestination {
  enum class Kind {
    kDevice,       // a new allocation on `device`
    kHostInline,   // bytes returned through Gather's `host_bytes` (waits)
    kHostStaging,  // the session's staging buffer at `staging_offset`
  };
  Kind kind = Kind::kDevice;
  DeviceIndex device;
  uint64_t staging_offset = 0;
};

class CommWork {
 public:
  // All must outlive this object; `profiler` may be null (no profiles).
  CommWork(DeviceBackend* backend, MemoryManager* memory, StreamManager* streams,
           StagingBuffers* staging, DeviceProfiler* profiler = nullptr)
      : backend_(backend),
        memory_(memory),
        streams_(streams),
        staging_(staging),
        profiler_(profiler) {}

  // Every call, besides the messages below: NOT_FOUND for memory that is
  // not the session's; OUT_OF_RANGE for a tensor that does not fit its
  // allocation; INVALID_ARGUMENT for a device out of range, a negative
  // dimension, a tensor of over 2^62 bytes, more than
  // kMaxCommTensorsPerRequest tensors or kMaxCommDevicesPerRequest
  // devices, or a stream on another device; RESOURCE_EXHAUSTED when the
  // results' memory is not there (nothing was queued).

  // broadcast(tensor, devices) or broadcast(tensor, out=out): exactly one
  // of the two. Results: one per device (the input itself on its own
  // device) or per `out` tensor, in order.
  absl::StatusOr<CommDone> Broadcast(SessionId session, const CommTensor& tensor,
                                     const std::optional<std::vector<int64_t>>& devices,
                                     const std::optional<std::vector<CommTensor>>& out,
                                     const CommOptions& options);
  // broadcast_coalesced(tensors, devices, buffer_size): results device by
  // device, each with one tensor per input (devices[0]'s are the inputs).
  // buffer_size only bounds PyTorch's flat staging buffers, which this
  // engine does not need (it copies each tensor straight into its result).
  absl::StatusOr<CommDone> BroadcastCoalesced(SessionId session,
                                              absl::Span<const CommTensor> tensors,
                                              absl::Span<const int64_t> devices,
                                              uint64_t buffer_size, const CommOptions& options);
  // reduce_add(inputs, destination): one result, the sum in PyTorch's
  // fallback order (the input on `destination`, then the others in order).
  absl::StatusOr<CommDone> ReduceAdd(SessionId session, absl::Span<const CommTensor> inputs,
                                     int64_t destination, const CommOptions& options);
  // reduce_add_coalesced(inputs, destination, buffer_size): `inputs` is one
  // list per device; result j sums tensor j of every list (always new).
  absl::StatusOr<CommDone> ReduceAddCoalesced(SessionId session,
                                              absl::Span<const std::vector<CommTensor>> inputs,
                                              int64_t destination, uint64_t buffer_size,
                                              const CommOptions& options);
  // scatter(tensor, devices, chunk_sizes, dim, streams) or scatter(tensor,
  // dim=dim, streams=streams, out=out). `chunk_streams[i]` (0: none) is the
  // stream chunk i is copied on. Results: one per chunk.
  absl::StatusOr<CommDone> Scatter(SessionId session, const CommTensor& tensor,
                                   const std::optional<std::vector<int64_t>>& devices,
                                   const std::optional<std::vector<int64_t>>& chunk_sizes,
                                   int64_t dim, absl::Span<const StreamId> chunk_streams,
                                   const std::optional<std::vector<CommTensor>>& out,
                                   const CommOptions& options);
  // gather(tensors, dim, destination) or gather(tensors, dim, out=out): one
  // result (for a host destination one without memory, id 0, that tells
  // the shape; `host_bytes` gets the bytes for kHostInline, at most 64 MiB).
  absl::StatusOr<CommDone> Gather(SessionId session, absl::Span<const CommTensor> tensors,
                                  int64_t dim, const std::optional<GatherDestination>& destination,
                                  const std::optional<CommTensor>& out, const CommOptions& options,
                                  std::string* host_bytes);
  // torch.cuda.nccl.all_reduce(inputs, outputs, op): every output (the
  // inputs themselves when `outputs` is absent) gets op over all inputs,
  // one tensor per device. Results: the outputs, in order.
  absl::StatusOr<CommDone> AllReduce(SessionId session, absl::Span<const CommTensor> inputs,
                                     const std::optional<std::vector<CommTensor>>& outputs,
                                     ReduceOp op, const CommOptions& options);

 private:
  // plan's step dst = op(dst, src) on `on`'s stream for `bytes` of `dtype`;
  // through scratch memory on `on` when it cannot read src's device.
  void AddReduce(CommPlan& plan, DeviceIndex on, ReduceOp op, RngDtype dtype,
                 const CommPlan::Operand& dst, const CommPlan::Operand& src, uint64_t bytes);
  // Whether a collective over `devices` runs on the backend's engine: it
  // has one and the devices are distinct (PyTorch's nccl.is_available).
  bool EngineRuns(absl::Span<const DeviceIndex> devices) const;
  // parts[0].send to every other part's recv: one engine broadcast, else
  // a copy per part on its device's stream.
  void AddBroadcast(CommPlan& plan, std::vector<CommPlan::AcrossPart> parts, uint64_t bytes);
  // reduce_add of the tensors in `slots` (on `devices`) into `result` on
  // devices[root]: one engine reduce, else PyTorch's fallback order (the
  // root's input, then the others in order).
  void AddReduceAdd(CommPlan& plan, absl::Span<const DeviceIndex> devices,
                    absl::Span<const size_t> slots, size_t root, size_t result, RngDtype dtype,
                    uint64_t bytes);
  // Allocates the plan's new memory, queues its steps between the two
  // meetings of the streams, frees its temporaries, and records the
  // completion event and waits as asked; frees the new results again when
  // anything failed.
  // `name` is the collective's in profiles.
  absl::StatusOr<CommDone> Run(SessionId session, absl::string_view name, CommPlan& plan,
                               const CommOptions& options);
  // The device of a tensor the session names, with its byte size checked.
  absl::StatusOr<DeviceIndex> DeviceOf(SessionId session, const CommTensor& tensor) const;

  DeviceBackend* backend_;
  MemoryManager* memory_;
  StreamManager* streams_;
  StagingBuffers* staging_;
  DeviceProfiler* profiler_;
};

}  // namespace gpumux
