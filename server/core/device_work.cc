#include "server/core/device_work.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

// The device view's name of a random fill, as torch's in-place ops read.
absl::string_view RandomWorkName(RngKind kind) {
  switch (kind) {
    case RngKind::kUniform:
      return "random uniform_";
    case RngKind::kNormal:
      return "random normal_";
    case RngKind::kBits:
      break;
  }
  return "random random_";
}

}  // namespace
namespace {

absl::Status CheckInlineSize(uint64_t size) {
  if (size > DeviceWork::kMaxInlineBytes) {
    return absl::InvalidArgumentError(absl::StrCat("an inline copy carries at most ",
                                                   DeviceWork::kMaxInlineBytes, " bytes, not ",
                                                   size, "; use the staging buffer"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkDone> DeviceWork::Run(SessionId session, absl::string_view name,
                                         absl::Span<const RangeUse> ranges,
                                         const WorkOptions& options, Enqueue enqueue) {
  GPUMUX_ASSIGN_OR_RETURN(AllocationView first, memory_->Lookup(session, ranges[0].id));
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream stream,
                          streams_->Resolve(session, first.device, options.stream));
  // The completion event is made before the work is queued, so that a
  // session at its event limit is refused before anything ran; it is
  // recorded once the work is queued.
  std::optional<EventView> event;
  if (options.completion_event) {
    GPUMUX_ASSIGN_OR_RETURN(
        event, streams_->CreateEvent(session, stream.device, EventFlags{.interprocess = true}));
  }
  bool other_device = false;
  DeviceProfiler::Work profiled =
      DeviceProfiler::Begin(profiler_, session, name,
                            ProfiledSite{stream.device, stream.id, stream.backend}, ranges[0].size);
  absl::Status queued = memory_->EnqueueOnAllocations(
      session, ranges, stream, [&](absl::Span<const DeviceSpan> spans) -> absl::Status {
        for (const DeviceSpan& span : spans) other_device |= span.device != stream.device;
        absl::Status status = enqueue(stream, spans);
        if (status.ok()) DeviceProfiler::Queued(profiled);
        return status;
      });
  WorkDone done;
  if (event.has_value()) {
    absl::StatusOr<std::string> handle;
    if (queued.ok()) queued = streams_->RecordEvent(session, event->id, stream.device, stream.id);
    if (queued.ok()) handle = streams_->IpcHandle(session, event->id);
    if (!queued.ok() || !handle.ok()) {
      streams_->DestroyEvent(session, event->id)
          .IgnoreError();  // gone with the session, or ours to drop
      return queued.ok() ? handle.status() : queued;
    }
    done.event = CompletionEvent{event->id, *std::move(handle)};
  }
  const bool ran = queued.ok();
  if (ran && (options.wait || other_device)) queued = backend_->SynchronizeStream(stream.backend);
  DeviceProfiler::End(std::move(profiled), ran);
  GPUMUX_RETURN_IF_ERROR(queued);
  return done;
}

absl::StatusOr<WorkDone> DeviceWork::DeviceToDevice(SessionId session, const RangeUse& dst,
                                                    AllocationId src, uint64_t src_offset,
                                                    const WorkOptions& options) {
  const RangeUse ranges[] = {dst, RangeUse{src, src_offset, dst.size}};
  return Run(session, "copy device_to_device", ranges, options,
             [&](const ResolvedStream& stream, absl::Span<const DeviceSpan> spans) {
               if (spans[1].device != stream.device) {
                 // As PyTorch's cross-device copy_ (a barrier with the source device's
                 // current stream), the copy first waits for the work the session
                 // queued on the source device, which may still be writing the source.
                 GPUMUX_RETURN_IF_ERROR(streams_->WaitStream(session, stream.device, stream.id,
                                                             spans[1].device, StreamId(0)));
               }
               return backend_->CopyDeviceToDevice(stream.backend, spans[0].device,
                                                   spans[0].address, spans[1].device,
                                                   spans[1].address, dst.size);
             });
}

bool DeviceWork::DeviceToDeviceWaits(SessionId session, AllocationId dst, AllocationId src,
                                     const WorkOptions& options) const {
  if (options.wait) return true;
  absl::StatusOr<AllocationView> to = memory_->Lookup(session, dst);
  absl::StatusOr<AllocationView> from = memory_->Lookup(session, src);
  return to.ok() && from.ok() && to->device != from->device;
}

absl::StatusOr<WorkDone> DeviceWork::HostToDevice(SessionId session, AllocationId dst,
                                                  uint64_t offset, absl::string_view data,
                                                  const WorkOptions& options) {
  GPUMUX_RETURN_IF_ERROR(CheckInlineSize(data.size()));
  const RangeUse ranges[] = {RangeUse{dst, offset, data.size()}};
  return Run(session, "copy host_to_device", ranges, options,
             [&](const ResolvedStream& stream, absl::Span<const DeviceSpan> spans) {
               // Queued work outlives the request unless the call waits: then the
               // request's bytes serve as they are, with no copy.
               const void* source = data.data();
               std::shared_ptr<const void> keep_alive;
               if (!options.wait) {
                 auto copy = std::make_shared<const std::string>(data);
                 source = copy->data();
                 keep_alive = std::move(copy);
               }
               return backend_->CopyHostToDevice(stream.backend, spans[0].address, source,
                                                 data.size(), std::move(keep_alive));
             });
}

absl::StatusOr<WorkDone> DeviceWork::HostToDeviceFromStaging(SessionId session, const RangeUse& dst,
                                                             uint64_t staging_offset,
                                                             const WorkOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(StagingBytes bytes, staging_->Bytes(session, staging_offset, dst.size));
  const RangeUse ranges[] = {dst};
  return Run(session, "copy host_to_device", ranges, options,
             [&](const ResolvedStream& stream, absl::Span<const DeviceSpan> spans) {
               return backend_->CopyHostToDevice(stream.backend, spans[0].address, bytes.data,
                                                 dst.size, bytes.keep_alive);
             });
}

absl::StatusOr<WorkDone> DeviceWork::DeviceToHost(SessionId session, const RangeUse& src,
                                                  const WorkOptions& options, std::string* out) {
  GPUMUX_RETURN_IF_ERROR(CheckInlineSize(src.size));
  out->resize(src.size);
  WorkOptions waiting = options;
  waiting.wait = true;  // `out` is only good until the call returns
  const RangeUse ranges[] = {src};
  return Run(session, "copy device_to_host", ranges, waiting,
             [&](const ResolvedStream& stream, absl::Span<const DeviceSpan> spans) {
               return backend_->CopyDeviceToHost(stream.backend, out->data(), spans[0].address,
                                                 src.size, nullptr);
             });
}

absl::StatusOr<WorkDone> DeviceWork::DeviceToHostIntoStaging(SessionId session, const RangeUse& src,
                                                             uint64_t staging_offset,
                                                             const WorkOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(StagingBytes bytes, staging_->Bytes(session, staging_offset, src.size));
  const RangeUse ranges[] = {src};
  return Run(session, "copy device_to_host", ranges, options,
             [&](const ResolvedStream& stream, absl::Span<const DeviceSpan> spans) {
               return backend_->CopyDeviceToHost(stream.backend, bytes.data, spans[0].address,
                                                 src.size, bytes.keep_alive);
             });
}

absl::StatusOr<WorkDone> DeviceWork::Memset(SessionId session, const RangeUse& dst, uint32_t value,
                                            const WorkOptions& options) {
  if (value > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("memset value ", value, " is not a byte (0..255)"));
  }
  const RangeUse ranges[] = {dst};
  return Run(session, "memset", ranges, options,
             [&](const ResolvedStream& stream, absl::Span<const DeviceSpan> spans) {
               return backend_->Memset(stream.backend, spans[0].address,
                                       static_cast<uint8_t>(value), dst.size);
             });
}

absl::StatusOr<GenerateDone> DeviceWork::Generate(SessionId session, AllocationId dst,
                                                  uint64_t offset, const RngRequest& request,
                                                  const WorkOptions& options) {
  GPUMUX_RETURN_IF_ERROR(ValidateRngRequest(request));
  // elements <= 2^60 and at most 8 bytes each: no overflow.
  const RangeUse ranges[] = {
      RangeUse{dst, offset, request.elements * RngElementSize(request.dtype)}};
  GenerateDone done;
  GPUMUX_ASSIGN_OR_RETURN(
      done.work, Run(session, RandomWorkName(request.kind), ranges, options,
                     [&](const ResolvedStream& stream, absl::Span<const DeviceSpan> spans) {
                       // The offset advances only once the ranges passed their checks, under
                       // the allocation lock right before queuing, so a session's calls
                       // draw disjoint parts of the stream in the order they are queued.
                       GPUMUX_ASSIGN_OR_RETURN(
                           RngState state,
                           rng_->Advance(session, stream.device, RngOffsetIncrement(request)));
                       done.drawn_from = state;
                       return backend_->FillRandom(stream.backend, spans[0].address, request,
                                                   state.seed, state.offset);
                     }));
  return done;
}

}  // namespace gpumux
