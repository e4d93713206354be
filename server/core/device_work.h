#pragma once

// DeviceWork: the copies, memsets and random fills a session queues on its
// streams (cudaMemcpyAsync, cudaMemsetAsync, torch's uniform_/normal_/
// random_), over allocations it owns or imported. Each call checks its ranges
// against the allocations, queues the work on the session's stream (0: its
// default stream on the device the work runs on), records that stream on the
// allocations (record_stream) so freeing them at once is safe, and then, as
// asked, records an interprocess completion event and waits. Thread-safe.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/rng_fill.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"
#include "server/core/device_profiler.h"
#include "server/core/memory_manager.h"
#include "server/core/rng_generators.h"
#include "server/core/staging_buffers.h"
#include "server/core/stream_manager.h"

namespace gpumux {

struct WorkOptions {
  StreamId stream;    // 0: the session's default stream on the work's device
  bool wait = false;  // return after the work completed
  bool completion_event = false;
};

struct WorkDone {
  std::optional<CompletionEvent> event;  // when asked for
};

struct GenerateDone {
  WorkDone work;
  RngState drawn_from;  // the generator state before the call
};

class DeviceWork {
 public:
  // Most bytes one inline copy carries (the daemon's message limit is set above it).
  static constexpr uint64_t kMaxInlineBytes = uint64_t{64} << 20;

  // All must outlive this object; `profiler` may be null (no profiles).
  DeviceWork(DeviceBackend* backend, MemoryManager* memory, StreamManager* streams,
             StagingBuffers* staging, RngGenerators* rng, DeviceProfiler* profiler = nullptr)
      : backend_(backend),
        memory_(memory),
        streams_(streams),
        staging_(staging),
        rng_(rng),
        profiler_(profiler) {}

  // Every call: NOT_FOUND for an allocation that is not a live one of the
  // session, or an unknown stream; OUT_OF_RANGE for a range outside its
  // allocation (or the staging buffer); INVALID_ARGUMENT for a stream on
  // another device than the work's. Zero bytes queue nothing but still
  // honour `options`.

  // Runs on the destination's device; across devices it first waits for the
  // session's default stream on the source's device (PyTorch's cross-device
  // barrier) and also waits for the copy (the source's device has no event
  // of that stream to delay its reuse).
  absl::StatusOr<WorkDone> DeviceToDevice(SessionId session, const RangeUse& dst, AllocationId src,
                                          uint64_t src_offset, const WorkOptions& options);
  // Whether DeviceToDevice from `src` to `dst` waits for its copy, and so
  // must run where blocking is allowed: when `options` asks it to, or when
  // the two are live allocations of the session on different devices. False
  // otherwise (an allocation that is not the session's fails the call at
  // once).
  bool DeviceToDeviceWaits(SessionId session, AllocationId dst, AllocationId src,
                           const WorkOptions& options) const;
  // INVALID_ARGUMENT above kMaxInlineBytes.
  absl::StatusOr<WorkDone> HostToDevice(SessionId session, AllocationId dst, uint64_t offset,
                                        absl::string_view data, const WorkOptions& options);
  // FAILED_PRECONDITION when the session has no staging buffer.
  absl::StatusOr<WorkDone> HostToDeviceFromStaging(SessionId session, const RangeUse& dst,
                                                   uint64_t staging_offset,
                                                   const WorkOptions& options);
  // Waits for the copy, then `*out` holds the bytes. INVALID_ARGUMENT above
  // kMaxInlineBytes.
  absl::StatusOr<WorkDone> DeviceToHost(SessionId session, const RangeUse& src,
                                        const WorkOptions& options, std::string* out);
  absl::StatusOr<WorkDone> DeviceToHostIntoStaging(SessionId session, const RangeUse& src,
                                                   uint64_t staging_offset,
                                                   const WorkOptions& options);
  // INVALID_ARGUMENT for a value above 255.
  absl::StatusOr<WorkDone> Memset(SessionId session, const RangeUse& dst, uint32_t value,
                                  const WorkOptions& options);
  // Fills request.elements values at `dst` from the session's generator on
  // the allocation's device and advances its offset, once the request and
  // range passed their checks. INVALID_ARGUMENT for a request
  // ValidateRngRequest refuses.
  absl::StatusOr<GenerateDone> Generate(SessionId session, AllocationId dst, uint64_t offset,
                                        const RngRequest& request, const WorkOptions& options);

 private:
  using Enqueue =
      absl::FunctionRef<absl::Status(const ResolvedStream&, absl::Span<const DeviceSpan>)>;
  // Resolves the stream on `ranges[0]`'s device, queues through `enqueue`
  // with the ranges pinned, then records the completion event and waits as
  // asked, or always when a range lies on another device.
  // `name` is the work's in profiles.
  absl::StatusOr<WorkDone> Run(SessionId session, absl::string_view name,
                               absl::Span<const RangeUse> ranges, const WorkOptions& options,
                               Enqueue enqueue);

  DeviceBackend* backend_;
  MemoryManager* memory_;
  StreamManager* streams_;
  StagingBuffers* staging_;
  RngGenerators* rng_;
  DeviceProfiler* profiler_;
};

}  // namespace gpumux
