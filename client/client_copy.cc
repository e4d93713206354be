// Client's copies and memset (the Copy service). Host bytes travel inline or
// through the staging buffer; see gpumux/copy.h for how staged copies share it.

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/client_testing.h"
#include "client/host_profiler.h"
#include "client/parallel_copy.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"

namespace gpumux {
namespace {

absl::Status CheckBuffer(const DeviceBuffer& buffer, absl::string_view role) {
  if (buffer.valid()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the ", role, " is an empty DeviceBuffer"));
}

absl::Status CheckHostPointer(const void* data, uint64_t size) {
  if (data != nullptr || size == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("host pointer is null for ", size, " bytes"));
}

// The daemon checks every call; a copy split into several calls is checked
// here first so that a bad one copies nothing.
absl::Status CheckRange(const DeviceBuffer& buffer, uint64_t offset, uint64_t size,
                        absl::string_view role) {
  if (offset <= buffer.size() && size <= buffer.size() - offset) return absl::OkStatus();
  return absl::OutOfRangeError(
      absl::StrCat("copy of ", size, " bytes at offset ", offset, " does not fit the ", role,
                   " allocation ", ToString(buffer.id()), " of ", buffer.size(), " bytes"));
}

// Options of one call of a copy split into several: only the last waits or
// reports completion.
CopyOptions ChunkOptions(const CopyOptions& options, bool last) {
  CopyOptions chunk = options;
  if (!last) {
    chunk.wait = false;
    chunk.completion_event = false;
  }
  return chunk;
}

// Calls `chunk(done, n, last)` for each piece of [0, size) of at most
// `piece` bytes, in order (once, with n = 0, for 0 bytes), up to the first
// error.
absl::Status ForEachChunk(uint64_t size, uint64_t piece,
                          absl::FunctionRef<absl::Status(uint64_t, uint64_t, bool)> chunk) {
  uint64_t done = 0;
  do {
    const uint64_t n = std::min(size - done, piece);
    const bool last = done + n == size;
    GPUMUX_RETURN_IF_ERROR(chunk(done, n, last));
    done += n;
  } while (done < size);
  return absl::OkStatus();
}

}  // namespace

absl::Status Client::Impl::SetRange(v1::DeviceRange* range, const DeviceBuffer& buffer,
                                    uint64_t offset, uint64_t size, absl::string_view role) const {
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t wire_offset, WireOffset(buffer, offset, size, role));
  range->set_allocation_id(buffer.local_ ? buffer.lease_.value() : buffer.id().value());
  range->set_offset(wire_offset);
  return absl::OkStatus();
}

bool Client::Impl::UseStaging(TransferPath path, uint64_t size) const {
  if (size == 0) return false;  // nothing to stage
  switch (path) {
    case TransferPath::kInline:
      return false;
    case TransferPath::kStaging:
      return true;
    case TransferPath::kAuto:
      break;
  }
  return size > max_inline_copy_ && !OverTcp();  // over TCP the buffer cannot be mapped
}

absl::StatusOr<StagingBuffer*> Client::Impl::StagingLocked() {
  if (staging_ != nullptr) return staging_.get();
  if (OverTcp()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a copy through the staging buffer needs the daemon's machine (a Unix "
                     "address), not ",
                     address_, ": over TCP copies go inline (TransferPath::kAuto or kInline)"));
  }
  v1::GetStagingBufferRequest request;
  request.set_min_size(staging_buffer_size_);
  v1::StagingBuffer response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return copy_stub_->GetStagingBuffer(context, request, &response);
  }));
  GPUMUX_ASSIGN_OR_RETURN(staging_, StagingBuffer::Map(response, memory_files_.get()));
  return staging_.get();
}

uint64_t StagingBufferSizeForTest(Client& client) {
  auto& impl = ImplOf(client);
  absl::MutexLock lock(&impl.staging_mu_);
  return impl.staging_ == nullptr ? 0 : impl.staging_->size();
}

absl::StatusOr<Event> copy::HostToDevice(Client& client, const DeviceBuffer& dst,
                                         uint64_t dst_offset, const void* src, uint64_t size,
                                         const CopyOptions& options) {
  GPUMUX_PROFILED("copy::HostToDevice");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  GPUMUX_RETURN_IF_ERROR(CheckBuffer(dst, "destination"));
  GPUMUX_RETURN_IF_ERROR(CheckHostPointer(src, size));
  GPUMUX_ASSIGN_OR_RETURN(const Stream stream,
                          impl.ResolveStream(options.stream, dst.device(), "the copy"));
  const char* bytes = static_cast<const char*>(src);
  return impl.UseStaging(options.path, size)
             ? impl.StagedHostToDevice(dst, dst_offset, bytes, size, stream, options)
             : impl.InlineHostToDevice(dst, dst_offset, bytes, size, stream, options);
}

absl::StatusOr<Event> Client::Impl::InlineHostToDevice(const DeviceBuffer& dst, uint64_t dst_offset,
                                                       const char* src, uint64_t size,
                                                       const Stream& stream,
                                                       const CopyOptions& options) {
  if (size > kMaxInlineCopyBytes) {  // several calls: check before the first
    GPUMUX_RETURN_IF_ERROR(CheckRange(dst, dst_offset, size, "destination"));
  }
  Event completion;
  const absl::Status copied = ForEachChunk(
      size, kMaxInlineCopyBytes, [&](uint64_t done, uint64_t n, bool last) -> absl::Status {
        v1::HostToDeviceRequest request;
        GPUMUX_RETURN_IF_ERROR(
            SetRange(request.mutable_dst(), dst, dst_offset + done, n, "destination"));
        request.set_data(src + done, n);
        *request.mutable_options() = ToProto(stream, ChunkOptions(options, last));
        v1::CopyResponse response;
        GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
          return copy_stub_->HostToDevice(context, request, &response);
        }));
        NoteDaemonWork(dst, stream, request.options().wait());
        if (last) {
          completion = AdoptCompletionEvent(stream.device(), response.event(),
                                            std::move(*response.mutable_event_ipc_handle()));
        }
        return absl::OkStatus();
      });
  if (!copied.ok()) return copied;
  return completion;
}

absl::StatusOr<Event> Client::Impl::StagedHostToDevice(const DeviceBuffer& dst, uint64_t dst_offset,
                                                       const char* src, uint64_t size,
                                                       const Stream& stream,
                                                       const CopyOptions& options) {
  GPUMUX_RETURN_IF_ERROR(CheckRange(dst, dst_offset, size, "destination"));
  absl::MutexLock lock(&staging_mu_);
  GPUMUX_ASSIGN_OR_RETURN(StagingBuffer * staging, StagingLocked());
  auto check = [this] { return CheckSession(); };
  int slot = 0;
  Event completion;
  const absl::Status copied = ForEachChunk(
      size, staging->half_size(), [&](uint64_t done, uint64_t n, bool last) -> absl::Status {
        // The half is written again only once the copy that last read it ran.
        GPUMUX_RETURN_IF_ERROR(staging->Wait(slot, check));
        ParallelMemcpy(staging->data() + staging->half_offset(slot), src + done, n);
        v1::HostToDeviceRequest request;
        GPUMUX_RETURN_IF_ERROR(
            SetRange(request.mutable_dst(), dst, dst_offset + done, n, "destination"));
        request.mutable_staging()->set_offset(staging->half_offset(slot));
        request.mutable_staging()->set_size(n);
        // Every call reports its completion, which guards the half, unless it
        // is the last and waits anyway.
        const bool waited = last && options.wait;
        v1::CopyOptions* wire = request.mutable_options();
        *wire = ToProto(stream, ChunkOptions(options, last));
        wire->set_completion_event(!waited || (last && options.completion_event));
        v1::CopyResponse response;
        GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
          return copy_stub_->HostToDevice(context, request, &response);
        }));
        NoteDaemonWork(dst, stream, request.options().wait());
        if (wire->completion_event() && response.event() == 0) {
          return absl::InternalError("gpumuxd returned no completion event for a staged copy");
        }
        Event event =
            AdoptCompletionEvent(stream.device(), response.event(), response.event_ipc_handle());
        if (waited) {
          completion = std::move(event);
        } else {
          staging->Track(slot, std::move(event), response.event_ipc_handle(),
                         self_.backend() == "cuda");
          if (last && options.completion_event) {
            if (staging->WaitsLocally(slot)) {
              completion = staging->TakeEvent(slot);
            } else {
              // The buffer needs the event to wait on; the caller gets another.
              EventOptions interprocess;
              interprocess.interprocess = true;
              completion = Event(self_, interprocess);
              GPUMUX_RETURN_IF_ERROR(completion.Record(stream));
            }
          }
        }
        slot ^= 1;
        return absl::OkStatus();
      });
  if (!copied.ok()) return copied;
  return completion;
}

absl::StatusOr<Event> copy::DeviceToHost(Client& client, void* dst, const DeviceBuffer& src,
                                         uint64_t src_offset, uint64_t size,
                                         const CopyOptions& options) {
  GPUMUX_PROFILED_WAIT("copy::DeviceToHost");
  auto& impl = ImplOf(client);
  GPUMUX_RETURN_IF_ERROR(CheckBuffer(src, "source"));
  GPUMUX_RETURN_IF_ERROR(CheckHostPointer(dst, size));
  GPUMUX_ASSIGN_OR_RETURN(const Stream stream,
                          impl.ResolveStream(options.stream, src.device(), "the copy"));
  char* bytes = static_cast<char*>(dst);
  return impl.UseStaging(options.path, size)
             ? impl.StagedDeviceToHost(bytes, src, src_offset, size, stream, options)
             : impl.InlineDeviceToHost(bytes, src, src_offset, size, stream, options);
}

absl::StatusOr<Event> Client::Impl::InlineDeviceToHost(char* dst, const DeviceBuffer& src,
                                                       uint64_t src_offset, uint64_t size,
                                                       const Stream& stream,
                                                       const CopyOptions& options) {
  if (size > kMaxInlineCopyBytes) {  // several calls: check before the first
    GPUMUX_RETURN_IF_ERROR(CheckRange(src, src_offset, size, "source"));
  }
  Event completion;
  const absl::Status copied = ForEachChunk(
      size, kMaxInlineCopyBytes, [&](uint64_t done, uint64_t n, bool last) -> absl::Status {
        v1::DeviceToHostRequest request;
        GPUMUX_RETURN_IF_ERROR(
            SetRange(request.mutable_src(), src, src_offset + done, n, "source"));
        request.set_inline_size(n);
        *request.mutable_options() = ToProto(stream, ChunkOptions(options, last));
        v1::DeviceToHostResponse response;
        GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
          return copy_stub_->DeviceToHost(context, request, &response);
        }));
        NoteDaemonWork(src, stream, request.options().wait());
        if (response.data().size() != n) {
          return absl::InternalError(absl::StrCat("gpumuxd returned ", response.data().size(),
                                                  " bytes for an inline copy of ", n));
        }
        if (n > 0)
          std::memcpy(dst + done, response.data().data(), n);  // dst may be null for 0 bytes
        if (last) {
          completion = AdoptCompletionEvent(stream.device(), response.event(),
                                            std::move(*response.mutable_event_ipc_handle()));
        }
        return absl::OkStatus();
      });
  if (!copied.ok()) return copied;
  return completion;
}

absl::StatusOr<Event> Client::Impl::StagedDeviceToHost(char* dst, const DeviceBuffer& src,
                                                       uint64_t src_offset, uint64_t size,
                                                       const Stream& stream,
                                                       const CopyOptions& options) {
  GPUMUX_RETURN_IF_ERROR(CheckRange(src, src_offset, size, "source"));
  absl::MutexLock lock(&staging_mu_);
  GPUMUX_ASSIGN_OR_RETURN(StagingBuffer * staging, StagingLocked());
  // The daemon writes the whole buffer: nothing queued may still read it.
  GPUMUX_RETURN_IF_ERROR(staging->WaitAll([this] { return CheckSession(); }));
  Event completion;
  const absl::Status copied = ForEachChunk(
      size, staging->size(), [&](uint64_t done, uint64_t n, bool last) -> absl::Status {
        v1::DeviceToHostRequest request;
        GPUMUX_RETURN_IF_ERROR(
            SetRange(request.mutable_src(), src, src_offset + done, n, "source"));
        request.mutable_staging()->set_offset(0);
        request.mutable_staging()->set_size(n);
        *request.mutable_options() = ToProto(stream, ChunkOptions(options, last));
        request.mutable_options()->set_wait(true);  // the bytes are read right after
        v1::DeviceToHostResponse response;
        GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
          return copy_stub_->DeviceToHost(context, request, &response);
        }));
        NoteDaemonWork(src, stream, request.options().wait());
        ParallelMemcpy(dst + done, staging->data(), n);
        if (last) {
          completion = AdoptCompletionEvent(stream.device(), response.event(),
                                            std::move(*response.mutable_event_ipc_handle()));
        }
        return absl::OkStatus();
      });
  if (!copied.ok()) return copied;
  return completion;
}

absl::StatusOr<Event> copy::DeviceToDevice(Client& client, const DeviceBuffer& dst,
                                           uint64_t dst_offset, const DeviceBuffer& src,
                                           uint64_t src_offset, uint64_t size,
                                           const CopyOptions& options) {
  GPUMUX_PROFILED("copy::DeviceToDevice");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  GPUMUX_RETURN_IF_ERROR(CheckBuffer(dst, "destination"));
  GPUMUX_RETURN_IF_ERROR(CheckBuffer(src, "source"));
  GPUMUX_ASSIGN_OR_RETURN(const Stream stream,
                          impl.ResolveStream(options.stream, dst.device(), "the copy"));
  if (src.device() != dst.device()) {
    // The daemon orders the copy only after its own stream's work; the
    // source was most likely written on the source device's current stream.
    GPUMUX_RETURN_IF_ERROR(stream.WaitStream(client.CurrentStream(src.device())));
  }
  v1::DeviceToDeviceRequest request;
  GPUMUX_RETURN_IF_ERROR(
      impl.SetRange(request.mutable_dst(), dst, dst_offset, size, "destination"));
  GPUMUX_RETURN_IF_ERROR(impl.SetRange(request.mutable_src(), src, src_offset, size, "source"));
  request.set_size(size);
  *request.mutable_options() = ToProto(stream, options);
  // A local source on another device is read on this device's stream,
  // which its own device's allocator cannot record: wait for the copy.
  if (src.local() && src.device() != dst.device()) request.mutable_options()->set_wait(true);
  v1::CopyResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.copy_stub_->DeviceToDevice(context, request, &response);
  }));
  impl.NoteDaemonWork(dst, stream, request.options().wait());
  impl.NoteDaemonWork(src, stream, request.options().wait());
  return impl.AdoptCompletionEvent(stream.device(), response.event(),
                                   std::move(*response.mutable_event_ipc_handle()));
}

absl::StatusOr<Event> copy::Memset(Client& client, const DeviceBuffer& dst, uint64_t offset,
                                   uint8_t value, uint64_t size, const CopyOptions& options) {
  GPUMUX_PROFILED("copy::Memset");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  GPUMUX_RETURN_IF_ERROR(CheckBuffer(dst, "destination"));
  GPUMUX_ASSIGN_OR_RETURN(const Stream stream,
                          impl.ResolveStream(options.stream, dst.device(), "the memset"));
  v1::MemsetRequest request;
  GPUMUX_RETURN_IF_ERROR(impl.SetRange(request.mutable_dst(), dst, offset, size, "destination"));
  request.set_size(size);
  request.set_value(value);
  *request.mutable_options() = ToProto(stream, options);
  v1::CopyResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.copy_stub_->Memset(context, request, &response);
  }));
  impl.NoteDaemonWork(dst, stream, request.options().wait());
  return impl.AdoptCompletionEvent(stream.device(), response.event(),
                                   std::move(*response.mutable_event_ipc_handle()));
}

}  // namespace gpumux
