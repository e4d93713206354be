#include "server/core/group_work.h"

#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"

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

absl::Status GroupWork::CheckWorldMultiple(uint64_t whole, uint64_t part, int world_size,
                                           absl::string_view message) {
  if (whole != part * static_cast<uint64_t>(world_size)) return absl::InvalidArgumentError(message);
  return absl::OkStatus();
}

absl::Status GroupWork::AwaitQueuedWork(const Operand& operand) {
  if (operand.bytes == 0) return absl::OkStatus();
  return backend_->SynchronizeStream(operand.stream.backend);
}

// The operands' bytes seen from the host. Where device memory is host memory
// (the host backend) the transport runs in place on it, the allocations held
// against frees for the call; elsewhere (CUDA) through the group's staging
// buffer, with copies on the operands' streams.
class GroupWork::Memory {
 public:
  Memory(GroupWork& work, SessionId session) : work_(work), session_(session) {}

  // Maps the operands' memory when it is host memory (their allocations are
  // held meanwhile), then runs `body`, which takes the group's turn: so the
  // collective holding the turn never waits for the memory books' lock,
  // which can wait for the allocator, which can wait for a stream that a
  // queued collective behind this one holds.
  absl::Status Run(std::initializer_list<const Operand*> operands,
                   absl::FunctionRef<absl::Status()> body) {
    if (!work_.backend_->memory_on_host()) return body();
    absl::InlinedVector<RangeUse, 2> ranges;
    absl::InlinedVector<const Operand*, 2> held;
    for (const Operand* operand : operands) {
      if (operand->bytes == 0) continue;
      ranges.push_back(operand->range);
      held.push_back(operand);
    }
    return work_.memory_->HoldAllocations(
        session_, ranges, [&](absl::Span<const DeviceSpan> spans) -> absl::Status {
          for (size_t i = 0; i < spans.size(); ++i) {
            GPUMUX_ASSIGN_OR_RETURN(
                HostMemoryView view,
                work_.backend_->AccessOnHost(spans[i].device, spans[i].address, held[i]->bytes));
            views_.emplace_back(held[i], std::move(view));
          }
          return body();
        });
  }

  // The member whose staging buffer Buffer and Scratch use: set once the
  // group's turn came.
  void Use(GroupRegistry::Member& member) { member_ = &member; }

  // A host buffer for `operand`: its own memory in place, else the staging
  // buffer (of at least `staging_bytes`).
  char* Buffer(const Operand& operand, uint64_t staging_bytes) {
    char* own = Own(operand);
    return own != nullptr ? own : member_->Staging(staging_bytes);
  }
  // A host buffer of `bytes` that is no operand's memory.
  char* Scratch(uint64_t bytes) { return member_->Staging(bytes); }

  // Copies the operand's bytes to `host` (nothing when that is where they are).
  absl::Status Load(const Operand& operand, char* host) {
    if (operand.bytes == 0) return absl::OkStatus();
    if (const char* own = Own(operand); own != nullptr) {
      if (own != host) std::memmove(host, own, operand.bytes);
      return absl::OkStatus();
    }
    GPUMUX_RETURN_IF_ERROR(work_.memory_->EnqueueOnAllocations(
        session_, absl::MakeConstSpan(&operand.range, 1), operand.stream,
        [&](absl::Span<const DeviceSpan> spans) {
          return work_.backend_->CopyDeviceToHost(operand.stream.backend, host, spans[0].address,
                                                  operand.bytes, nullptr);
        }));
    return work_.backend_->SynchronizeStream(operand.stream.backend);
  }

  // Copies `host` into the operand (nothing when it is the operand's memory)
  // and waits for it: a staging buffer is reused by the next collective.
  absl::Status Store(const Operand& operand, const char* host) {
    if (operand.bytes == 0) return absl::OkStatus();
    if (char* own = Own(operand); own != nullptr) {
      if (own != host) std::memmove(own, host, operand.bytes);
      return absl::OkStatus();
    }
    GPUMUX_RETURN_IF_ERROR(work_.memory_->EnqueueOnAllocations(
        session_, absl::MakeConstSpan(&operand.range, 1), operand.stream,
        [&](absl::Span<const DeviceSpan> spans) {
          return work_.backend_->CopyHostToDevice(operand.stream.backend, spans[0].address, host,
                                                  operand.bytes, nullptr);
        }));
    return work_.backend_->SynchronizeStream(operand.stream.backend);
  }

 private:
  char* Own(const Operand& operand) const {
    for (const auto& [held, view] : views_) {
      if (held == &operand) return view.data;
    }
    return nullptr;
  }

  GroupWork& work_;
  const SessionId session_;
  GroupRegistry::Member* member_ = nullptr;
  absl::InlinedVector<std::pair<const Operand*, HostMemoryView>, 2> views_;
};

std::optional<absl::Status> GroupWork::OnDevice(
    SessionId session, GroupRegistry::Member& member,
    std::initializer_list<const Operand*> operands,
    absl::FunctionRef<absl::Status(GroupCommunicator&, BackendStream, absl::Span<const DeviceSpan>)>
        issue) {
  GroupCommunicator* comm = member.device_communicator();
  const Operand& first = **operands.begin();
  if (comm == nullptr || comm->device() != first.device) return std::nullopt;
  absl::InlinedVector<RangeUse, 2> ranges;
  for (const Operand* operand : operands) ranges.push_back(operand->range);
  const BackendStream stream = first.stream.backend;
  GPUMUX_RETURN_IF_ERROR(memory_->EnqueueOnAllocations(
      session, ranges, first.stream, [&](absl::Span<const DeviceSpan> spans) {
        return member.Device(issue(*comm, stream, spans));
      }));
  return member.Device(comm->Wait(stream, member.timeout()));
}

absl::StatusOr<CommDone> GroupWork::Done(SessionId session, const Operand& result,
                                         const CommOptions& options,
                                         std::optional<EventView> created) {
  CommDone done;
  done.results.push_back(CommResult{result.tensor, std::nullopt});
  done.event_device = result.device;
  if (options.completion_event) {
    if (!created.has_value()) {
      GPUMUX_ASSIGN_OR_RETURN(
          created, streams_->CreateEvent(session, result.device, EventFlags{.interprocess = true}));
    }
    const EventView event = *created;
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

absl::StatusOr<CommDone> GroupWork::QueueOnHost(
    SessionId session, GroupRef group, absl::string_view collective, uint64_t bytes,
    std::initializer_list<const Operand*> operands, const Operand& result,
    const CommOptions& options, absl::FunctionRef<absl::Status(int rank, int world_size)> check,
    absl::string_view profile_name, HostCollective run) {
  // The completion event is made first: once the collective is queued the
  // call must not fail, or its caller would see an error for a collective
  // that runs.
  std::optional<EventView> event;
  if (options.completion_event) {
    GPUMUX_ASSIGN_OR_RETURN(
        event, streams_->CreateEvent(session, result.device, EventFlags{.interprocess = true}));
  }
  // What the group's thread runs with; going (run or dropped) lets the
  // stream go on and the memory be reused.
  struct Queued {
    absl::InlinedVector<HostMemoryView, 2> views;
    absl::InlinedVector<char*, 2> data;  // per operand
    std::shared_ptr<absl::Notification> reached;
    StreamHold hold;
    DeviceProfiler::Work profiled;
    HostCollective run;
  };
  const Operand& first = **operands.begin();
  auto queued = std::make_unique<Queued>();
  queued->data.assign(operands.size(), nullptr);
  queued->profiled = DeviceProfiler::Begin(profiler_, session, profile_name,
                                           ProfiledSite{first.device, first.stream.id}, bytes);
  queued->run = std::move(run);
  absl::InlinedVector<RangeUse, 2> ranges;
  absl::InlinedVector<size_t, 2> held;  // the operands `ranges` are of
  for (size_t i = 0; i < operands.size(); ++i) {
    const Operand& operand = *operands.begin()[i];
    if (operand.bytes == 0) continue;
    ranges.push_back(operand.range);
    held.push_back(i);
  }
  const absl::Status enqueued = memory_->EnqueueOnAllocations(
      session, ranges, first.stream, [&](absl::Span<const DeviceSpan> spans) -> absl::Status {
        for (size_t i = 0; i < spans.size(); ++i) {
          GPUMUX_ASSIGN_OR_RETURN(HostMemoryView view,
                                  backend_->AccessOnHost(spans[i].device, spans[i].address,
                                                         operands.begin()[held[i]]->bytes));
          queued->data[held[i]] = view.data;
          queued->views.push_back(std::move(view));
        }
        if (!spans.empty()) {
          auto reached = std::make_shared<absl::Notification>();
          GPUMUX_ASSIGN_OR_RETURN(
              queued->hold,
              backend_->HoldStream(first.stream.backend, [reached] { reached->Notify(); }));
          queued->reached = std::move(reached);
        }
        return groups_->Queue(
            group, collective, bytes, check,
            [queued = std::move(queued)](GroupRegistry::Member& member) -> absl::Status {
              absl::Status status;
              if (queued->reached != nullptr &&
                  !queued->reached->WaitForNotificationWithTimeout(member.timeout())) {
                // The peers wait for this member's part: the group breaks.
                status = member.Fail(absl::DeadlineExceededError(absl::StrCat(
                    "the work queued on the stream before it did not finish within the group's "
                    "timeout of ",
                    absl::FormatDuration(member.timeout()))));
              } else {
                status = std::move(queued->run)(member, queued->data);
              }
              // The stream goes on when the group's thread drops `queued`,
              // after it recorded how the collective went.
              DeviceProfiler::End(std::move(queued->profiled), status.ok(), /*on_device_too=*/true);
              return status;
            },
            // Noted before the stream goes on: a synchronize that waited for
            // it finds the error.
            [streams = streams_, session, device = first.device, stream = first.stream.id,
             collective = std::string(collective)](const absl::Status& status) {
              if (status.ok()) return;
              streams->NoteAsyncError(
                  session, device,
                  absl::Status(
                      status.code(),
                      absl::StrCat(collective, " queued with async_op on stream ", stream.value(),
                                   " of device ", device.value(), " failed: ", status.message())));
            });
      });
  if (!enqueued.ok()) {
    if (event.has_value()) streams_->DestroyEvent(session, event->id).IgnoreError();
    return enqueued;
  }
  return Done(session, result, options, event);
}

absl::StatusOr<CommDone> GroupWork::RunWaited(
    SessionId session, GroupRef group, absl::string_view collective, uint64_t bytes,
    std::initializer_list<const Operand*> operands, const Operand& result,
    const CommOptions& options, absl::string_view profile_name,
    absl::FunctionRef<absl::Status(Memory&, GroupRegistry::Member&)> body) {
  const Operand& first = **operands.begin();
  GPUMUX_RETURN_IF_ERROR(AwaitQueuedWork(first));
  DeviceProfiler::Work profiled = DeviceProfiler::Begin(
      profiler_, session, profile_name, ProfiledSite{first.device, first.stream.id}, bytes);
  Memory memory(*this, session);
  const absl::Status ran = memory.Run(operands, [&] {
    return groups_->Run(group, collective, bytes, [&](GroupRegistry::Member& member) {
      memory.Use(member);
      return body(memory, member);
    });
  });
  // The group call ends when the collective did: its host time is its device time.
  DeviceProfiler::End(std::move(profiled), ran.ok(), /*on_device_too=*/true);
  if (!ran.ok()) return ran;
  return Done(session, result, options);
}

absl::StatusOr<CommDone> GroupWork::AllReduce(SessionId session, GroupRef group,
                                              const CommTensor& tensor, ReduceOp op,
                                              const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand data, Resolve(session, tensor, options));
  if (Queues(options.async_op)) {
    return QueueOnHost(
        session, group, "all_reduce", data.bytes, {&data}, data, options,
        [](int, int) { return absl::OkStatus(); }, "group all_reduce",
        [count = data.count, dtype = data.tensor.dtype, op](GroupRegistry::Member& member,
                                                            absl::Span<char* const> host) {
          return member.AllReduce(host[0], count, dtype, op);
        });
  }
  return RunWaited(
      session, group, "all_reduce", data.bytes, {&data}, data, options, "group all_reduce",
      [&](Memory& memory, GroupRegistry::Member& member) -> absl::Status {
        if (data.bytes == 0) return absl::OkStatus();
        if (std::optional<absl::Status> on_device =
                OnDevice(session, member, {&data},
                         [&](GroupCommunicator& comm, BackendStream stream,
                             absl::Span<const DeviceSpan> spans) {
                           return comm.AllReduce(stream, spans[0].address, spans[0].address,
                                                 data.count, data.tensor.dtype, op);
                         })) {
          return *on_device;
        }
        char* host = memory.Buffer(data, data.bytes);
        GPUMUX_RETURN_IF_ERROR(memory.Load(data, host));
        GPUMUX_RETURN_IF_ERROR(member.AllReduce(host, data.count, data.tensor.dtype, op));
        return memory.Store(data, host);
      });
}

absl::StatusOr<CommDone> GroupWork::Broadcast(SessionId session, GroupRef group,
                                              const CommTensor& tensor, int64_t root,
                                              const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand data, Resolve(session, tensor, options));
  const auto check = [root](int, int world_size) -> absl::Status {
    if (root < 0 || root >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("root rank ", root, " is out of range for world size ", world_size));
    }
    return absl::OkStatus();
  };
  if (Queues(options.async_op)) {
    return QueueOnHost(
        session, group, "broadcast", data.bytes, {&data}, data, options, check, "group broadcast",
        [bytes = data.bytes, root](GroupRegistry::Member& member, absl::Span<char* const> host) {
          return member.Broadcast(host[0], bytes, static_cast<int>(root));
        });
  }
  return RunWaited(
      session, group, "broadcast", data.bytes, {&data}, data, options, "group broadcast",
      [&](Memory& memory, GroupRegistry::Member& member) -> absl::Status {
        GPUMUX_RETURN_IF_ERROR(check(member.rank(), member.world_size()));
        if (data.bytes == 0) return absl::OkStatus();
        if (std::optional<absl::Status> on_device =
                OnDevice(session, member, {&data},
                         [&](GroupCommunicator& comm, BackendStream stream,
                             absl::Span<const DeviceSpan> spans) {
                           return comm.Broadcast(stream, spans[0].address, spans[0].address,
                                                 data.bytes, static_cast<int>(root));
                         })) {
          return *on_device;
        }
        const bool sends = member.rank() == root;
        char* host = memory.Buffer(data, data.bytes);
        if (sends) GPUMUX_RETURN_IF_ERROR(memory.Load(data, host));
        GPUMUX_RETURN_IF_ERROR(member.Broadcast(host, data.bytes, static_cast<int>(root)));
        return sends ? absl::OkStatus() : memory.Store(data, host);
      });
}

absl::StatusOr<CommDone> GroupWork::AllGather(SessionId session, GroupRef group,
                                              const CommTensor& input, const CommTensor& output,
                                              const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand in, Resolve(session, input, options));
  GPUMUX_ASSIGN_OR_RETURN(const Operand out, Resolve(session, output, options));
  GPUMUX_RETURN_IF_ERROR(
      CheckPair(in, out, "output tensor must have the same type as input tensor"));
  const auto check = [&in, &out](int, int world_size) {
    return CheckWorldMultiple(out.count, in.count, world_size,
                              "output tensor size must be equal to world_size times input tensor "
                              "size");
  };
  if (Queues(options.async_op)) {
    return QueueOnHost(
        session, group, "all_gather", out.bytes, {&in, &out}, out, options, check,
        "group all_gather",
        [bytes = in.bytes](GroupRegistry::Member& member, absl::Span<char* const> host) {
          if (bytes == 0) return absl::OkStatus();
          return member.AllGather(host[0], host[1], bytes);
        });
  }
  return RunWaited(
      session, group, "all_gather", out.bytes, {&in, &out}, out, options, "group all_gather",
      [&](Memory& memory, GroupRegistry::Member& member) -> absl::Status {
        GPUMUX_RETURN_IF_ERROR(check(member.rank(), member.world_size()));
        if (out.bytes == 0) return absl::OkStatus();
        if (std::optional<absl::Status> on_device = OnDevice(
                session, member, {&in, &out},
                [&](GroupCommunicator& comm, BackendStream stream,
                    absl::Span<const DeviceSpan> spans) {
                  return comm.AllGather(stream, spans[0].address, spans[1].address, in.bytes);
                })) {
          return *on_device;
        }
        char* host = memory.Buffer(out, out.bytes);
        char* mine = host + static_cast<uint64_t>(member.rank()) * in.bytes;
        GPUMUX_RETURN_IF_ERROR(memory.Load(in, mine));
        GPUMUX_RETURN_IF_ERROR(member.AllGather(mine, host, in.bytes));
        return memory.Store(out, host);
      });
}

absl::StatusOr<CommDone> GroupWork::ReduceScatter(SessionId session, GroupRef group,
                                                  const CommTensor& input, const CommTensor& output,
                                                  ReduceOp op, const CommOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Operand in, Resolve(session, input, options));
  GPUMUX_ASSIGN_OR_RETURN(const Operand out, Resolve(session, output, options));
  GPUMUX_RETURN_IF_ERROR(
      CheckPair(in, out, "input tensor must be the same type as the output tensor."));
  const auto check = [&in, &out](int, int world_size) {
    return CheckWorldMultiple(in.count, out.count, world_size,
                              "input tensor must be the same size as output size times world "
                              "size");
  };
  if (Queues(options.async_op)) {
    return QueueOnHost(
        session, group, "reduce_scatter", in.bytes, {&in, &out}, out, options, check,
        "group reduce_scatter",
        [in_bytes = in.bytes, out_bytes = out.bytes, count = in.count, dtype = in.tensor.dtype, op](
            GroupRegistry::Member& member, absl::Span<char* const> host) -> absl::Status {
          if (in_bytes == 0) return absl::OkStatus();
          // The input is left as it was: the reduction runs on a copy.
          char* scratch = member.Staging(in_bytes);
          std::memcpy(scratch, host[0], in_bytes);
          const absl::Status reduced = member.AllReduce(scratch, count, dtype, op);
          if (reduced.ok()) {
            std::memmove(host[1], scratch + static_cast<uint64_t>(member.rank()) * out_bytes,
                         out_bytes);
          }
          return reduced;
        });
  }
  return RunWaited(
      session, group, "reduce_scatter", in.bytes, {&in, &out}, out, options, "group reduce_scatter",
      [&](Memory& memory, GroupRegistry::Member& member) -> absl::Status {
        GPUMUX_RETURN_IF_ERROR(check(member.rank(), member.world_size()));
        if (in.bytes == 0) return absl::OkStatus();
        if (std::optional<absl::Status> on_device =
                OnDevice(session, member, {&in, &out},
                         [&](GroupCommunicator& comm, BackendStream stream,
                             absl::Span<const DeviceSpan> spans) {
                           return comm.ReduceScatter(stream, spans[0].address, spans[1].address,
                                                     out.count, out.tensor.dtype, op);
                         })) {
          return *on_device;
        }
        // The input is left as it was: the reduction runs on a copy.
        char* host = memory.Scratch(in.bytes);
        GPUMUX_RETURN_IF_ERROR(memory.Load(in, host));
        GPUMUX_RETURN_IF_ERROR(member.AllReduce(host, in.count, in.tensor.dtype, op));
        return memory.Store(out, host + static_cast<uint64_t>(member.rank()) * out.bytes);
      });
}

}  // namespace gpumux
