#include "server/core/group_work.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"

namespace gpumux {

struct GroupWork::Operand {
  CommTensor tensor;
  uint64_t bytes = 0;
  uint64_t count = 0;
  DeviceIndex device;
  ResolvedStream stream;
  RangeUse range;
};

absl::StatusOr<GroupWork::Operand> GroupWork::Resolve(SessionId session, const CommTensor& tensor,
                                                      const CommOptions& options) {
  Operand operand{.tensor = tensor};
  GPUMUX_ASSIGN_OR_RETURN(operand.bytes, CommTensorBytes(tensor));
  if (operand.bytes > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a group collective moves at most ", kMaxBytes,
                                                   " bytes per tensor, not ", operand.bytes));
  }
  operand.count = operand.bytes / RngElementSize(tensor.dtype);
  GPUMUX_ASSIGN_OR_RETURN(operand.device, CommTensorDevice(*memory_, session, tensor));
  if (tensor.id.value() != 0) operand.range = RangeUse{tensor.id, tensor.offset, operand.bytes};
  StreamId stream(0);
  for (const auto& [device, id] : options.streams) {
    if (device == operand.device) stream = id;
  }
  GPUMUX_ASSIGN_OR_RETURN(operand.stream, streams_->Resolve(session, operand.device, stream));
  return operand;
}

absl::Status GroupWork::CheckPair(const Operand& in, const Operand& out,
                                  absl::string_view type_message) {
  if (in.tensor.dtype != out.tensor.dtype) return absl::InvalidArgumentError(type_message);
  if (in.device != out.device) {
    return absl::InvalidArgumentError(
        absl::StrCat("input and output tensors must be on the same device, not ", in.device.value(),
                     " and ", out.device.value()));
  }
  return absl::OkStatus();
}

absl::Status GroupWork::AwaitQueuedWork(const Operand& operand) {
  if (operand.bytes == 0) return absl::OkStatus();
  return backend_->SynchronizeStream(operand.stream.backend);
}

absl::Status GroupWork::ToHost(SessionId session, const Operand& operand, char* host) {
  if (operand.bytes == 0) return absl::OkStatus();
  GPUMUX_RETURN_IF_ERROR(memory_->EnqueueOnAllocations(
      session, absl::MakeConstSpan(&operand.range, 1), operand.stream,
      [&](absl::Span<const DeviceSpan> spans) {
        return backend_->CopyDeviceToHost(operand.stream.backend, host, spans[0].address,
                                          operand.bytes, nullptr);
      }));
  return backend_->SynchronizeStream(operand.stream.backend);
}

absl::Status GroupWork::FromHost(SessionId session, const Operand& operand, const char* host) {
  if (operand.bytes == 0) return absl::OkStatus();
  GPUMUX_RETURN_IF_ERROR(memory_->EnqueueOnAllocations(
      session, absl::MakeConstSpan(&operand.range, 1), operand.stream,
      [&](absl::Span<const DeviceSpan> spans) {
        return backend_->CopyHostToDevice(operand.stream.backend, spans[0].address, host,
                                          operand.bytes, nullptr);
      }));
  // The staging buffer is the group's: the copy completes before it is reused.
  return backend_->SynchronizeStream(operand.stream.backend);
}

absl::StatusOr<CommDone> GroupWork::Done(SessionId session, const Operand& result,
                                         const CommOptions& options) {
  CommDone done;
  done.results.push_back(CommResult{result.tensor, std::nullopt});
  done.event_device = result.device;
  if (options.completion_event) {
    GPUMUX_ASSIGN_OR_RETURN(
        const EventView event,
        streams_->CreateEvent(session, result.device, EventFlags{.interprocess = true}));
    absl::Status recorded =
        streams_->RecordEvent(session, event.id, result.device, result.stream.id);
    absl::StatusOr<std::string> handle =
        recorded.ok() ? streams_->IpcHandle(session, event.id) : recorded;
    if (!handle.ok()) {
      streams_->DestroyEvent(session, event.id).IgnoreError();
      return handle.status();
    }
    done.event = CompletionEvent{event.id, *std::move(handle)};
  }
  return done;
}

absl::StatusOr<CommDone> GroupWork::AllReduce(SessionId session, absl::string_view group,
                                              const CommTensor& tensor, ReduceOp op,
                                              const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand data, Resolve(session, tensor, options));
  GPUMUX_RETURN_IF_ERROR(AwaitQueuedWork(data));
  const absl::Status ran = groups_->Run(
      group, "all_reduce", data.bytes, [&](GroupRegistry::Member& member) -> absl::Status {
        if (data.bytes == 0) return absl::OkStatus();
        char* host = member.Staging(data.bytes);
        GPUMUX_RETURN_IF_ERROR(ToHost(session, data, host));
        GPUMUX_RETURN_IF_ERROR(member.AllReduce(host, data.count, data.tensor.dtype, op));
        return FromHost(session, data, host);
      });
  if (!ran.ok()) return ran;
  return Done(session, data, options);
}

absl::StatusOr<CommDone> GroupWork::Broadcast(SessionId session, absl::string_view group,
                                              const CommTensor& tensor, int64_t root,
                                              const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand data, Resolve(session, tensor, options));
  GPUMUX_RETURN_IF_ERROR(AwaitQueuedWork(data));
  const absl::Status ran = groups_->Run(
      group, "broadcast", data.bytes, [&](GroupRegistry::Member& member) -> absl::Status {
        if (root < 0 || root >= member.world_size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "root rank ", root, " is out of range for world size ", member.world_size()));
        }
        if (data.bytes == 0) return absl::OkStatus();
        char* host = member.Staging(data.bytes);
        const bool sends = member.rank() == root;
        if (sends) GPUMUX_RETURN_IF_ERROR(ToHost(session, data, host));
        GPUMUX_RETURN_IF_ERROR(member.Broadcast(host, data.bytes, static_cast<int>(root)));
        return sends ? absl::OkStatus() : FromHost(session, data, host);
      });
  if (!ran.ok()) return ran;
  return Done(session, data, options);
}

absl::StatusOr<CommDone> GroupWork::AllGather(SessionId session, absl::string_view group,
                                              const CommTensor& input, const CommTensor& output,
                                              const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand in, Resolve(session, input, options));
  GPUMUX_ASSIGN_OR_RETURN(const Operand out, Resolve(session, output, options));
  GPUMUX_RETURN_IF_ERROR(
      CheckPair(in, out, "output tensor must have the same type as input tensor"));
  GPUMUX_RETURN_IF_ERROR(AwaitQueuedWork(in));
  const absl::Status ran = groups_->Run(
      group, "all_gather", out.bytes, [&](GroupRegistry::Member& member) -> absl::Status {
        if (out.count != in.count * static_cast<uint64_t>(member.world_size())) {
          return absl::InvalidArgumentError(
              "output tensor size must be equal to world_size times input tensor size");
        }
        if (out.bytes == 0) return absl::OkStatus();
        char* host = member.Staging(out.bytes);
        char* mine = host + static_cast<uint64_t>(member.rank()) * in.bytes;
        GPUMUX_RETURN_IF_ERROR(ToHost(session, in, mine));
        GPUMUX_RETURN_IF_ERROR(member.AllGather(mine, host, in.bytes));
        return FromHost(session, out, host);
      });
  if (!ran.ok()) return ran;
  return Done(session, out, options);
}

absl::StatusOr<CommDone> GroupWork::ReduceScatter(SessionId session, absl::string_view group,
                                                  const CommTensor& input, const CommTensor& output,
                                                  ReduceOp op, const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand in, Resolve(session, input, options));
  GPUMUX_ASSIGN_OR_RETURN(const Operand out, Resolve(session, output, options));
  GPUMUX_RETURN_IF_ERROR(
      CheckPair(in, out, "input tensor must be the same type as the output tensor."));
  GPUMUX_RETURN_IF_ERROR(AwaitQueuedWork(in));
  const absl::Status ran = groups_->Run(
      group, "reduce_scatter", in.bytes, [&](GroupRegistry::Member& member) -> absl::Status {
        if (in.count != out.count * static_cast<uint64_t>(member.world_size())) {
          return absl::InvalidArgumentError(
              "input tensor must be the same size as output size times world size");
        }
        if (in.bytes == 0) return absl::OkStatus();
        char* host = member.Staging(in.bytes);
        GPUMUX_RETURN_IF_ERROR(ToHost(session, in, host));
        GPUMUX_RETURN_IF_ERROR(member.AllReduce(host, in.count, in.tensor.dtype, op));
        return FromHost(session, out, host + static_cast<uint64_t>(member.rank()) * out.bytes);
      });
  if (!ran.ok()) return ran;
  return Done(session, out, options);
}

}  // namespace gpumux
