// CudaBackend's work on streams: copies, memset, random fills, and pinning.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "server/backend/cuda/cuda_backend.h"
#include "server/backend/cuda/fill_random_kernel.h"
#include "server/backend/cuda/reduce_kernel.h"

namespace gpumux {

absl::Status CudaBackend::CheckRange(DeviceIndex device, uint64_t address, uint64_t bytes) const {
  const Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  auto it = d.segments.upper_bound(address);
  if (it != d.segments.begin()) {
    --it;
    const uint64_t offset = address - it->first;
    if (offset < it->second.size && bytes <= it->second.size - offset) return absl::OkStatus();
  }
  if (auto range = RangeAt(d.ranges, address); range != d.ranges.end()) {
    const Range& r = range->second;
    const uint64_t offset = address - range->first;
    bool mapped = bytes <= r.size - offset;
    const uint64_t last = bytes == 0 ? 0 : (offset + bytes - 1) / r.page_size;
    for (uint64_t i = offset / r.page_size; mapped && bytes > 0 && i <= last; ++i) {
      mapped = r.pages[i].page != nullptr;
    }
    if (mapped) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "CUDA device %d: %d bytes at 0x%x are not inside one live segment of the device, nor in "
      "mapped pages of one expandable segment",
      device.value(), bytes, address));
}

absl::Status CudaBackend::ReleaseAfter(const Stream& stream,
                                       std::shared_ptr<const void> keep_alive) {
  if (keep_alive == nullptr) return absl::OkStatus();
  cudaEvent_t done = nullptr;
  cudaError_t error = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (error == cudaSuccess) {
    error = cudaEventRecord(done, stream.get());
    if (error != cudaSuccess) cudaEventDestroy(done);
  }
  if (error != cudaSuccess) {
    // The copy is queued: the buffer must outlive it even so.
    absl::Status status = Check(stream.device, error, "recording a copy's completion");
    cudaStreamSynchronize(stream.get());
    return status;
  }
  absl::MutexLock lock(&reaper_mu_);
  keep_alives_.push_back(KeepAlive{stream.device, done, std::move(keep_alive)});
  reaper_wake_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyDeviceToDevice(BackendStream stream, DeviceIndex dst_device,
                                             uint64_t dst, DeviceIndex src_device, uint64_t src,
                                             uint64_t bytes) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(dst_device));
  GPUMUX_RETURN_IF_ERROR(UseDevice(src_device));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  if (bytes == 0) return absl::OkStatus();
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(CheckRange(dst_device, dst, bytes));
  GPUMUX_RETURN_IF_ERROR(CheckRange(src_device, src, bytes));
  if (dst_device == src_device && dst == src) return absl::OkStatus();
  auto* to = reinterpret_cast<void*>(dst);
  auto* from = reinterpret_cast<const void*>(src);
  if (dst_device != src_device) {
    return Check(
        s.device,
        cudaMemcpyPeerAsync(to, dst_device.value(), from, src_device.value(), bytes, s.get()),
        "cudaMemcpyPeerAsync");
  }
  const bool overlap = dst < src + bytes && src < dst + bytes;
  if (!overlap) {
    return Check(s.device, cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, s.get()),
                 "cudaMemcpyAsync");
  }
  // memmove. Chunks no longer than the distance between the ranges do not
  // overlap; taken in the right direction, each reads its bytes before a
  // later chunk overwrites them (the stream runs them in order).
  const uint64_t distance = dst > src ? dst - src : src - dst;
  if (distance * 64 >= bytes) {
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(distance, bytes - done);
      // Forward when moving down, from the end when moving up.
      const uint64_t offset = dst < src ? done : bytes - done - n;
      GPUMUX_RETURN_IF_ERROR(Check(
          s.device,
          cudaMemcpyAsync(static_cast<char*>(to) + offset, static_cast<const char*>(from) + offset,
                          n, cudaMemcpyDeviceToDevice, s.get()),
          "cudaMemcpyAsync (overlapping ranges)"));
      done += n;
    }
    return absl::OkStatus();
  }
  // A shift much shorter than the range: through a temporary, freed by the
  // reaper once the copies ran.
  void* temporary = nullptr;
  const cudaError_t error = cudaMalloc(&temporary, bytes);
  if (error == cudaErrorMemoryAllocation) {
    ResetCudaError();
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA device ", s.device.value(), ": no ", bytes,
                     " bytes free for an overlapping copy's temporary"));
  }
  GPUMUX_RETURN_IF_ERROR(Check(s.device, error, "cudaMalloc (overlapping copy)"));
  const int device = s.device.value();
  std::shared_ptr<const void> owned(temporary, [device](const void* p) {
    cudaSetDevice(device);
    cudaFree(const_cast<void*>(p));
  });
  cudaError_t copied = cudaMemcpyAsync(temporary, from, bytes, cudaMemcpyDeviceToDevice, s.get());
  if (copied == cudaSuccess)
    copied = cudaMemcpyAsync(to, temporary, bytes, cudaMemcpyDeviceToDevice, s.get());
  absl::Status status = Check(s.device, copied, "cudaMemcpyAsync (overlapping ranges)");
  absl::Status released = ReleaseAfter(s, std::move(owned));
  return status.ok() ? released : status;
}

absl::Status CudaBackend::CopyHostToDevice(BackendStream stream, uint64_t dst, const void* src,
                                           uint64_t bytes, std::shared_ptr<const void> keep_alive) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr)
    return absl::InvalidArgumentError("host-to-device copy from a null host pointer");
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(CheckRange(s.device, dst, bytes));
  GPUMUX_RETURN_IF_ERROR(Check(
      s.device,
      cudaMemcpyAsync(reinterpret_cast<void*>(dst), src, bytes, cudaMemcpyHostToDevice, s.get()),
      "cudaMemcpyAsync (host to device)"));
  return ReleaseAfter(s, std::move(keep_alive));
}

absl::Status CudaBackend::CopyDeviceToHost(BackendStream stream, void* dst, uint64_t src,
                                           uint64_t bytes, std::shared_ptr<void> keep_alive) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr)
    return absl::InvalidArgumentError("device-to-host copy into a null host pointer");
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(CheckRange(s.device, src, bytes));
  GPUMUX_RETURN_IF_ERROR(Check(s.device,
                               cudaMemcpyAsync(dst, reinterpret_cast<const void*>(src), bytes,
                                               cudaMemcpyDeviceToHost, s.get()),
                               "cudaMemcpyAsync (device to host)"));
  return ReleaseAfter(s, std::move(keep_alive));
}

absl::Status CudaBackend::Memset(BackendStream stream, uint64_t dst, uint8_t value,
                                 uint64_t bytes) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  if (bytes == 0) return absl::OkStatus();
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(CheckRange(s.device, dst, bytes));
  return Check(s.device, cudaMemsetAsync(reinterpret_cast<void*>(dst), value, bytes, s.get()),
               "cudaMemsetAsync");
}

absl::Status CudaBackend::FillRandom(BackendStream stream, uint64_t dst, const RngRequest& request,
                                     uint64_t seed, uint64_t offset) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  GPUMUX_RETURN_IF_ERROR(ValidateRngRequest(request));
  if (offset % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("random fill: generator offset ", offset, " is not a multiple of 4"));
  }
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(
      CheckRange(s.device, dst, request.elements * RngElementSize(request.dtype)));
  FillRandomLaunch launch;
  launch.dtype = static_cast<int>(request.dtype);
  launch.kind = static_cast<int>(request.kind);
  launch.elements = request.elements;
  launch.a = request.a;
  launch.b = request.b;
  launch.seed = seed;
  launch.offset = offset;
  return Check(s.device, LaunchFillRandom(s.get(), reinterpret_cast<void*>(dst), launch),
               "the random fill kernel");
}

absl::Status CudaBackend::CopyDeviceToDevice2D(BackendStream stream, DeviceIndex dst_device,
                                               uint64_t dst, uint64_t dst_pitch,
                                               DeviceIndex src_device, uint64_t src,
                                               uint64_t src_pitch, uint64_t row_bytes,
                                               uint64_t rows) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(dst_device));
  GPUMUX_RETURN_IF_ERROR(UseDevice(src_device));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  if (row_bytes == 0 || rows == 0) return absl::OkStatus();
  if (dst_pitch < row_bytes || src_pitch < row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("2D copy: pitches ", dst_pitch, " and ",
                                                   src_pitch, " must be at least the row's ",
                                                   row_bytes, " bytes"));
  }
  for (const uint64_t pitch : {dst_pitch, src_pitch}) {
    if ((rows - 1) > (UINT64_MAX - row_bytes) / pitch)
      return absl::InvalidArgumentError("2D copy: the rows overflow the address space");
  }
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(CheckRange(dst_device, dst, (rows - 1) * dst_pitch + row_bytes));
  GPUMUX_RETURN_IF_ERROR(CheckRange(src_device, src, (rows - 1) * src_pitch + row_bytes));
  // cudaMemcpy2D takes pitches up to cudaDeviceProp::memPitch (2^31 - 1);
  // beyond, row by row.
  constexpr uint64_t kMaxPitch = INT32_MAX;
  if (dst_pitch > kMaxPitch || src_pitch > kMaxPitch) {
    for (uint64_t r = 0; r < rows; ++r) {
      auto* to = reinterpret_cast<void*>(dst + r * dst_pitch);
      auto* from = reinterpret_cast<const void*>(src + r * src_pitch);
      GPUMUX_RETURN_IF_ERROR(Check(
          s.device,
          cudaMemcpyPeerAsync(to, dst_device.value(), from, src_device.value(), row_bytes, s.get()),
          "cudaMemcpyPeerAsync (a 2D copy's row)"));
    }
    return absl::OkStatus();
  }
  if (dst_device == src_device) {
    return Check(s.device,
                 cudaMemcpy2DAsync(reinterpret_cast<void*>(dst), dst_pitch,
                                   reinterpret_cast<const void*>(src), src_pitch, row_bytes, rows,
                                   cudaMemcpyDeviceToDevice, s.get()),
                 "cudaMemcpy2DAsync");
  }
  cudaMemcpy3DPeerParms params = {};
  params.dstPtr = cudaPitchedPtr{reinterpret_cast<void*>(dst), dst_pitch, row_bytes, rows};
  params.dstDevice = dst_device.value();
  params.srcPtr = cudaPitchedPtr{reinterpret_cast<void*>(src), src_pitch, row_bytes, rows};
  params.srcDevice = src_device.value();
  params.extent = cudaExtent{row_bytes, rows, 1};
  return Check(s.device, cudaMemcpy3DPeerAsync(&params, s.get()), "cudaMemcpy3DPeerAsync");
}

bool CudaBackend::CanReadPeer(DeviceIndex device, DeviceIndex peer) const {
  if (!CheckDevice(device).ok() || !CheckDevice(peer).ok()) return false;
  return peer_readable_[device.value()][peer.value()];
}

absl::Status CudaBackend::Reduce(BackendStream stream, ReduceOp op, RngDtype dtype, uint64_t dst,
                                 DeviceIndex src_device, uint64_t src, uint64_t count) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(src_device));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  if (count == 0) return absl::OkStatus();
  if (!CanReadPeer(s.device, src_device)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce on device ", s.device.value(),
                                                   " cannot read device ", src_device.value(),
                                                   "'s memory (no peer access)"));
  }
  const uint64_t element = RngElementSize(dtype);
  if (count > UINT64_MAX / element)
    return absl::InvalidArgumentError(absl::StrCat("reduce: ", count, " elements overflow"));
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(CheckRange(s.device, dst, count * element));
  GPUMUX_RETURN_IF_ERROR(CheckRange(src_device, src, count * element));
  return Check(
      s.device,
      LaunchReduce(s.get(), static_cast<int>(op), static_cast<int>(dtype),
                   reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), count),
      "the reduction kernel");
}

absl::Status CudaBackend::FinishAverage(BackendStream stream, RngDtype dtype, uint64_t data,
                                        uint64_t count, int ranks) {
  GPUMUX_ASSIGN_OR_RETURN(Stream s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(UseDevice(s.device));
  if (count == 0) return absl::OkStatus();
  const uint64_t element = RngElementSize(dtype);
  if (count > UINT64_MAX / element)
    return absl::InvalidArgumentError(absl::StrCat("average: ", count, " elements overflow"));
  absl::ReaderMutexLock enqueuing(&enqueue_mu_);  // until the work is queued
  GPUMUX_RETURN_IF_ERROR(CheckRange(s.device, data, count * element));
  return Check(s.device,
               LaunchFinishAverage(s.get(), static_cast<int>(dtype), reinterpret_cast<void*>(data),
                                   count, ranks),
               "the averaging kernel");
}

absl::Status CudaBackend::PinHostMemory(void* data, uint64_t bytes) {
  if (data == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot pin ", bytes, " bytes at ",
                                                   data == nullptr ? "null" : "a host pointer",
                                                   ": pin a non-null range of at least one byte"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (pinned_.contains(data))
      return absl::AlreadyExistsError("host memory at this address is already pinned");
  }
  // Portable: pinned for every device's context, not only the current one.
  const cudaError_t error = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (error == cudaErrorHostMemoryAlreadyRegistered) {
    ResetCudaError();
    return absl::AlreadyExistsError("host memory in this range is already pinned");
  }
  GPUMUX_RETURN_IF_ERROR(CudaStatus(error, absl::StrCat("cudaHostRegister(", bytes, " bytes)")));
  absl::MutexLock lock(&mu_);
  pinned_.emplace(data, bytes);
  return absl::OkStatus();
}

absl::Status CudaBackend::UnpinHostMemory(void* data) {
  if (data == nullptr) return absl::InvalidArgumentError("cannot unpin a null pointer");
  {
    absl::MutexLock lock(&mu_);
    if (pinned_.erase(data) == 0)
      return absl::NotFoundError("host memory at this address is not pinned");
  }
  return CudaStatus(cudaHostUnregister(data), "cudaHostUnregister");
}

absl::StatusOr<HostMemoryView> CudaBackend::AccessOnHost(DeviceIndex device, uint64_t address,
                                                         uint64_t bytes) {
  return absl::FailedPreconditionError(
      absl::StrFormat("cuda device %d: %d bytes at 0x%x are device memory, which the host cannot "
                      "address in place; copy them to host memory",
                      device.value(), bytes, address));
}

absl::StatusOr<StreamHold> CudaBackend::HoldStream(BackendStream /*stream*/,
                                                   absl::AnyInvocable<void() &&> /*reached*/) {
  return absl::FailedPreconditionError(
      "a cuda stream cannot wait on the daemon's host work without blocking a driver thread; "
      "wait for the host work instead");
}

}  // namespace gpumux
