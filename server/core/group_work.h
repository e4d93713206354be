#pragma once

// GroupWork: a session's collectives on a group of daemons
// (server/core/group_registry.h), torch.distributed's all_reduce,
// broadcast, all_gather_into_tensor and reduce_scatter_tensor on its own
// memory. Each call takes its tensors' device stream (CommOptions::streams,
// else the default stream) and runs the group's transport once the work
// queued on it before the call ran: in place on the session's memory where
// device memory is host memory (the host backend; the allocations cannot be
// freed meanwhile); on the group's device communicator (NCCL, queued on that
// stream) where it has one on the tensor's device; else through the group's
// host staging buffer with copies on that stream. It returns once the result
// is in the session's memory (the transport is synchronous: its peers' work
// is in it), before any work queued after it. With CommOptions::async_op on
// the host backend it returns once queued instead: the stream is held at
// that point (DeviceBackend::HoldStream) and the group's thread runs the
// collective in place once the work before it ran, then lets the stream go
// on (the allocations are recorded on the stream, so a free waits for it);
// one that fails or does not run notes its error for the session's next
// synchronize on the device (StreamManager::NoteAsyncError) before then.
// Thread-safe; one collective of a group runs at a time, in the order called.

#include <cstdint>
#include <initializer_list>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/reduce.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"
#include "server/core/comm_work.h"
#include "server/core/group_registry.h"
#include "server/core/memory_manager.h"
#include "server/core/stream_manager.h"

namespace gpumux {

class GroupWork {
 public:
  // Staging is daemon memory: one collective moves at most this much.
  static constexpr uint64_t kMaxBytes = uint64_t{4} << 30;

  // All must outlive this object.
  GroupWork(GroupRegistry* groups, DeviceBackend* backend, MemoryManager* memory,
            StreamManager* streams, DeviceProfiler* profiler = nullptr)
      : groups_(groups),
        backend_(backend),
        memory_(memory),
        streams_(streams),
        profiler_(profiler) {}

  // Besides GroupRegistry::Run's errors: NOT_FOUND for memory that is not
  // the session's, OUT_OF_RANGE for a tensor that does not fit its
  // allocation, INVALID_ARGUMENT for a bad shape, a tensor past kMaxBytes, or
  // a stream on another device. Results: the tensor written (the output).
  absl::StatusOr<CommDone> AllReduce(SessionId session, GroupRef group, const CommTensor& tensor,
                                     ReduceOp op, const CommOptions& options);
  // INVALID_ARGUMENT for a root outside the group.
  absl::StatusOr<CommDone> Broadcast(SessionId session, GroupRef group, const CommTensor& tensor,
                                     int64_t root, const CommOptions& options);
  // `output` holds world_size times `input`'s elements, of its dtype, on its
  // device (INVALID_ARGUMENT otherwise, with PyTorch's messages).
  absl::StatusOr<CommDone> AllGather(SessionId session, GroupRef group, const CommTensor& input,
                                     const CommTensor& output, const CommOptions& options);
  // `input` holds world_size times `output`'s elements, likewise.
  absl::StatusOr<CommDone> ReduceScatter(SessionId session, GroupRef group, const CommTensor& input,
                                         const CommTensor& output, ReduceOp op,
                                         const CommOptions& options);

  // Whether a call with `async_op` returns once queued: where memory is
  // host memory; elsewhere it waits.
  bool Queues(bool async_op) const { return async_op && backend_->memory_on_host(); }

  // INVALID_ARGUMENT for a device this daemon does not have (a group's).
  absl::Status CheckDevice(DeviceIndex device) const { return memory_->CheckDevice(device); }

 private:
  struct Operand;
  // The tensor's memory, device and stream, checked.
  absl::StatusOr<Operand> Resolve(SessionId session, const CommTensor& tensor,
                                  const CommOptions& options);
  // An input and output of one dtype (else INVALID_ARGUMENT `type_message`,
  // PyTorch's) on one device.
  static absl::Status CheckPair(const Operand& in, const Operand& out,
                                absl::string_view type_message);
  // INVALID_ARGUMENT `message` (PyTorch's) unless `whole` is world_size
  // times `part` elements (all_gather's output, reduce_scatter's input).
  static absl::Status CheckWorldMultiple(uint64_t whole, uint64_t part, int world_size,
                                         absl::string_view message);
  // Waits for the work queued on the operand's stream so far, before the
  // group's lock is taken: a session whose stream waits long holds up only
  // its own call, not the group's other collectives.
  absl::Status AwaitQueuedWork(const Operand& operand);
  class Memory;
  // A queued collective on the operands' host memory, given in the order of
  // `operands` (null for an operand of no bytes).
  using HostCollective =
      absl::AnyInvocable<absl::Status(GroupRegistry::Member&, absl::Span<char* const>) &&>;
  // A waited collective: waits for the work queued on the first operand's
  // stream, then runs `body` in the group's turn (GroupRegistry::Run) with
  // the operands' host memory held (Memory::Run, its staging member set),
  // profiled as `profile_name` on that stream. The call's results:
  // `result`, and the completion event when asked for.
  absl::StatusOr<CommDone> RunWaited(
      SessionId session, GroupRef group, absl::string_view collective, uint64_t bytes,
      std::initializer_list<const Operand*> operands, const Operand& result,
      const CommOptions& options, absl::string_view profile_name,
      absl::FunctionRef<absl::Status(Memory&, GroupRegistry::Member&)> body);
  // Holds the first operand's stream and queues `run` on the group
  // (GroupRegistry::Queue, with `check`), profiled as `profile_name` from
  // now until it ran; a failure, or not running, is the session's async
  // error on the stream's device. The call's results: `result`, and the
  // completion event when asked for.
  absl::StatusOr<CommDone> QueueOnHost(
      SessionId session, GroupRef group, absl::string_view collective, uint64_t bytes,
      std::initializer_list<const Operand*> operands, const Operand& result,
      const CommOptions& options, absl::FunctionRef<absl::Status(int rank, int world_size)> check,
      absl::string_view profile_name, HostCollective run);
  // Runs the collective on the group's device communicator when it has one
  // on the operands' device: `issue` queues it on the first operand's
  // stream with the operands' device addresses (their allocations recorded
  // on that stream), then the call waits for it within the group's timeout.
  // nullopt when the group has none there: the host path runs.
  std::optional<absl::Status> OnDevice(
      SessionId session, GroupRegistry::Member& member,
      std::initializer_list<const Operand*> operands,
      absl::FunctionRef<absl::Status(GroupCommunicator&, BackendStream,
                                     absl::Span<const DeviceSpan>)>
          issue);
  // The result and the completion event when asked for (recorded on the
  // result's stream; `created` when the caller made it already).
  absl::StatusOr<CommDone> Done(SessionId session, const Operand& result,
                                const CommOptions& options,
                                std::optional<EventView> created = std::nullopt);

  GroupRegistry* groups_;
  DeviceBackend* backend_;
  MemoryManager* memory_;
  StreamManager* streams_;
  DeviceProfiler* profiler_;
};

}  // namespace gpumux
