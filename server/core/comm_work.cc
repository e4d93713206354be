// CommWork's common part: a tensor's device, whether the backend's engine
// runs a collective, and Run, which carries out the plan every call builds.
// The planners live by operation in comm_broadcast.cc, comm_reduce.cc and
// comm_scatter_gather.cc.

#include "server/core/comm_work.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

using Operand = CommPlan::Operand;
using AcrossPart = CommPlan::AcrossPart;

}  // namespace

absl::StatusOr<DeviceIndex> CommWork::DeviceOf(SessionId session, const CommTensor& tensor) const {
  return CommTensorDevice(*memory_, session, tensor);
}

bool CommWork::EngineRuns(absl::Span<const DeviceIndex> devices) const {
  if (backend_->collectives() == nullptr || devices.empty()) return false;
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) return false;
    }
  }
  return true;
}

absl::StatusOr<CommDone> CommWork::Run(SessionId session, absl::string_view name, CommPlan& plan,
                                       const CommOptions& options) {
  // Streams, one per device taking part.
  std::vector<ResolvedStream> streams;
  streams.reserve(plan.devices().size());
  // Every stream named is checked, also where its device takes no part.
  for (const auto& [named_device, stream] : options.streams) {
    if (absl::c_linear_search(plan.devices(), named_device)) continue;
    GPUMUX_RETURN_IF_ERROR(memory_->CheckDevice(named_device));
    if (stream.value() != 0) {
      GPUMUX_RETURN_IF_ERROR(streams_->Resolve(session, named_device, stream).status());
    }
  }
  for (DeviceIndex device : plan.devices()) {
    StreamId id(0);
    for (const auto& [named_device, stream] : options.streams) {
      if (named_device == device) id = stream;
    }
    GPUMUX_ASSIGN_OR_RETURN(ResolvedStream resolved, streams_->Resolve(session, device, id));
    streams.push_back(resolved);
  }
  const auto stream_of = [&](DeviceIndex device) -> const ResolvedStream& {
    for (const ResolvedStream& stream : streams) {
      if (stream.device == device) return stream;
    }
    return streams.front();  // unreachable: every step's device took part
  };

  std::optional<EventView> event;
  if (options.completion_event) {
    GPUMUX_ASSIGN_OR_RETURN(
        event, streams_->CreateEvent(session, plan.root(), EventFlags{.interprocess = true}));
  }
  std::vector<AllocationId> results;
  std::vector<AllocationId> temporaries;
  const auto undo = [&](absl::Status status) {
    if (event.has_value()) streams_->DestroyEvent(session, event->id).IgnoreError();
    // Queued work on these is ordered on their own streams: nothing else
    // reuses their blocks before it ran.
    if (!results.empty()) memory_->Free(session, results).IgnoreError();
    if (!temporaries.empty()) memory_->Free(session, temporaries).IgnoreError();
    return status;
  };

  // New memory, each on the stream of its device that writes it.
  for (CommPlan::Slot& slot : plan.slots()) {
    if (slot.kind == CommPlan::SlotKind::kExisting) continue;
    absl::StatusOr<AllocationView> view = memory_->Allocate(
        session, slot.device, stream_of(slot.device).id, slot.range.size, /*shareable=*/false);
    if (!view.ok()) return undo(view.status());
    slot.range.id = view->id;
    slot.allocation = *view;
    (slot.kind == CommPlan::SlotKind::kResult ? results : temporaries).push_back(view->id);
  }

  // The slots with memory; an existing tensor without elements has none.
  std::vector<RangeUse> ranges;
  std::vector<size_t> range_of(plan.slots().size(), 0);
  for (size_t i = 0; i < plan.slots().size(); ++i) {
    const CommPlan::Slot& slot = plan.slots()[i];
    if (slot.range.id.value() == 0) continue;
    range_of[i] = ranges.size();
    ranges.push_back(slot.range);
  }

  const std::vector<DeviceIndex>& devices = plan.devices();
  const auto meet = [&]() -> absl::Status {
    const ResolvedStream& root = streams.front();
    for (size_t i = 1; i < streams.size(); ++i) {
      GPUMUX_RETURN_IF_ERROR(
          streams_->WaitStream(session, root.device, root.id, streams[i].device, streams[i].id));
    }
    for (size_t i = 1; i < streams.size(); ++i) {
      GPUMUX_RETURN_IF_ERROR(
          streams_->WaitStream(session, streams[i].device, streams[i].id, root.device, root.id));
    }
    return absl::OkStatus();
  };
  // Timed on the root's stream, which the others meet at the end.
  uint64_t bytes = 0;
  for (const RangeUse& range : ranges) bytes = std::max(bytes, range.size);
  DeviceProfiler::Work profiled = DeviceProfiler::Begin(
      profiler_, session, name,
      ProfiledSite{streams.front().device, streams.front().id, streams.front().backend}, bytes);
  absl::Status queued = memory_->EnqueueOnAllocations(
      session, ranges, streams, [&](absl::Span<const DeviceSpan> spans) -> absl::Status {
        const auto address = [&](Operand operand) {
          return spans[range_of[operand.slot]].address + operand.offset;
        };
        const auto device = [&](Operand operand) { return plan.DeviceOfSlot(operand.slot); };
        const auto across = [&](const CommPlan::Step& step) -> absl::Status {
          std::vector<CollectivePart> parts;
          for (const AcrossPart& part : step.across) {
            parts.push_back(CollectivePart{part.device, stream_of(part.device).backend,
                                           address(part.send), address(part.recv)});
          }
          CollectiveEngine& engine = *backend_->collectives();  // planned only with one
          switch (step.kind) {
            case CommPlan::Step::Kind::kAllReduceAcross:
              return engine.AllReduce(parts, step.op, step.dtype, step.count);
            case CommPlan::Step::Kind::kBroadcastAcross:
              return engine.Broadcast(parts, step.root, step.count);
            default:
              return engine.Reduce(parts, step.root, step.op, step.dtype, step.count);
          }
        };
        if (devices.size() > 1) GPUMUX_RETURN_IF_ERROR(meet());
        for (const CommPlan::Step& step : plan.steps()) {
          const BackendStream stream = stream_of(step.on).backend;
          switch (step.kind) {
            case CommPlan::Step::Kind::kMeet:
              if (devices.size() > 1) GPUMUX_RETURN_IF_ERROR(meet());
              break;
            case CommPlan::Step::Kind::kCopy:
              GPUMUX_RETURN_IF_ERROR(
                  backend_->CopyDeviceToDevice(stream, device(step.dst), address(step.dst),
                                               device(step.src), address(step.src), step.bytes));
              break;
            case CommPlan::Step::Kind::kCopy2D:
              GPUMUX_RETURN_IF_ERROR(backend_->CopyDeviceToDevice2D(
                  stream, device(step.dst), address(step.dst), step.dst_pitch, device(step.src),
                  address(step.src), step.src_pitch, step.bytes, step.rows));
              break;
            case CommPlan::Step::Kind::kReduce:
              GPUMUX_RETURN_IF_ERROR(backend_->Reduce(stream, step.op, step.dtype,
                                                      address(step.dst), device(step.src),
                                                      address(step.src), step.count));
              break;
            case CommPlan::Step::Kind::kAverage:
              GPUMUX_RETURN_IF_ERROR(backend_->FinishAverage(stream, step.dtype, address(step.dst),
                                                             step.count, step.ranks));
              break;
            case CommPlan::Step::Kind::kToHost:
              GPUMUX_RETURN_IF_ERROR(backend_->CopyDeviceToHost(
                  stream, step.host, address(step.src), step.bytes, step.keep_alive));
              break;
            case CommPlan::Step::Kind::kAllReduceAcross:
            case CommPlan::Step::Kind::kBroadcastAcross:
            case CommPlan::Step::Kind::kReduceAcross:
              GPUMUX_RETURN_IF_ERROR(across(step));
              break;
          }
        }
        if (devices.size() > 1) GPUMUX_RETURN_IF_ERROR(meet());
        DeviceProfiler::Queued(profiled);
        return absl::OkStatus();
      });
  if (!queued.ok()) {
    DeviceProfiler::End(std::move(profiled), false);
    return undo(queued);
  }
  if (!temporaries.empty()) {
    // Recorded on their stream: their blocks wait for the work queued there.
    memory_->Free(session, temporaries).IgnoreError();  // only gone with the session
    temporaries.clear();
  }

  CommDone done;
  const ResolvedStream& root = streams.front();
  if (event.has_value()) {
    absl::Status recorded = streams_->RecordEvent(session, event->id, root.device, root.id);
    absl::StatusOr<std::string> handle =
        recorded.ok() ? streams_->IpcHandle(session, event->id) : recorded;
    if (!handle.ok()) return undo(handle.status());
    done.event = CompletionEvent{event->id, *std::move(handle)};
    done.event_device = root.device;
  }
  if (options.wait) {
    absl::Status waited = backend_->SynchronizeStream(root.backend);
    DeviceProfiler::End(std::move(profiled), true);
    if (!waited.ok()) {
      // The results' memory stays the session's: the work was queued.
      return waited;
    }
  }
  DeviceProfiler::End(std::move(profiled), true);  // a no-op after the wait's
  for (CommPlan::Result& result : plan.results()) {
    CommResult out{result.tensor, std::nullopt};
    if (result.slot.has_value()) {
      const CommPlan::Slot& slot = plan.slots()[*result.slot];
      out.tensor.id = slot.range.id;
      out.allocation = slot.allocation;
    }
    done.results.push_back(std::move(out));
  }
  return done;
}

}  // namespace gpumux
