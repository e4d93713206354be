// HostBackend's work on streams: copies, memset and random fills through
// the segment mappings Translate hands out, plus host-memory pinning.

#include "server/backend/host/host_backend.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tensor/reduce.h"
#include "common/tensor/rng_fill.h"

namespace gpumux {

absl::Status HostBackend::CopyDeviceToDevice(BackendStream stream, DeviceIndex dst_device,
                                             uint64_t dst, DeviceIndex src_device, uint64_t src,
                                             uint64_t bytes) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();
  GPUMUX_ASSIGN_OR_RETURN(HostView to, Translate(dst_device, dst, bytes));
  GPUMUX_ASSIGN_OR_RETURN(HostView from, Translate(src_device, src, bytes));
  return Submit(*s, stream, [to = std::move(to), from = std::move(from), bytes] {
    std::memmove(to.data, from.data, bytes);  // ranges in one segment may overlap
  });
}

absl::Status HostBackend::CopyHostToDevice(BackendStream stream, uint64_t dst, const void* src,
                                           uint64_t bytes, std::shared_ptr<const void> keep_alive) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr)
    return absl::InvalidArgumentError("host-to-device copy from a null host pointer");
  GPUMUX_ASSIGN_OR_RETURN(HostView to, Translate(s->device(), dst, bytes));
  return Submit(*s, stream, [to = std::move(to), src, bytes, keep_alive = std::move(keep_alive)] {
    std::memcpy(to.data, src, bytes);
  });
}

absl::Status HostBackend::CopyDeviceToHost(BackendStream stream, void* dst, uint64_t src,
                                           uint64_t bytes, std::shared_ptr<void> keep_alive) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr)
    return absl::InvalidArgumentError("device-to-host copy into a null host pointer");
  GPUMUX_ASSIGN_OR_RETURN(HostView from, Translate(s->device(), src, bytes));
  return Submit(*s, stream,
                [from = std::move(from), dst, bytes, keep_alive = std::move(keep_alive)] {
                  std::memcpy(dst, from.data, bytes);
                });
}

absl::Status HostBackend::Memset(BackendStream stream, uint64_t dst, uint8_t value,
                                 uint64_t bytes) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();
  GPUMUX_ASSIGN_OR_RETURN(HostView to, Translate(s->device(), dst, bytes));
  return Submit(*s, stream,
                [to = std::move(to), value, bytes] { std::memset(to.data, value, bytes); });
}

absl::Status HostBackend::FillRandom(BackendStream stream, uint64_t dst, const RngRequest& request,
                                     uint64_t seed, uint64_t offset) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  GPUMUX_RETURN_IF_ERROR(ValidateRngRequest(request));
  if (offset % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("random fill: generator offset ", offset, " is not a multiple of 4"));
  }
  // elements <= 2^60 and elements are at most 8 bytes: no overflow.
  const uint64_t bytes = request.elements * RngElementSize(request.dtype);
  GPUMUX_ASSIGN_OR_RETURN(HostView to, Translate(s->device(), dst, bytes));
  return Submit(*s, stream, [to = std::move(to), request, seed, offset] {
    gpumux::FillRandom(to.data, request, seed, offset);
  });
}

absl::Status HostBackend::CopyDeviceToDevice2D(BackendStream stream, DeviceIndex dst_device,
                                               uint64_t dst, uint64_t dst_pitch,
                                               DeviceIndex src_device, uint64_t src,
                                               uint64_t src_pitch, uint64_t row_bytes,
                                               uint64_t rows) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (row_bytes == 0 || rows == 0) return absl::OkStatus();
  if (dst_pitch < row_bytes || src_pitch < row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("2D copy: pitches ", dst_pitch, " and ",
                                                   src_pitch, " must be at least the row's ",
                                                   row_bytes, " bytes"));
  }
  // The last row ends at (rows - 1) * pitch + row_bytes; no overflow for
  // ranges Translate accepts, which lie in one segment.
  const auto extent = [&](uint64_t pitch) -> absl::StatusOr<uint64_t> {
    if ((rows - 1) > (UINT64_MAX - row_bytes) / pitch)
      return absl::InvalidArgumentError("2D copy: the rows overflow the address space");
    return (rows - 1) * pitch + row_bytes;
  };
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t dst_extent, extent(dst_pitch));
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t src_extent, extent(src_pitch));
  GPUMUX_ASSIGN_OR_RETURN(HostView to, Translate(dst_device, dst, dst_extent));
  GPUMUX_ASSIGN_OR_RETURN(HostView from, Translate(src_device, src, src_extent));
  return Submit(
      *s, stream,
      [to = std::move(to), from = std::move(from), dst_pitch, src_pitch, row_bytes, rows] {
        for (uint64_t r = 0; r < rows; ++r)
          std::memmove(to.data + r * dst_pitch, from.data + r * src_pitch, row_bytes);
      });
}

bool HostBackend::CanReadPeer(DeviceIndex /*device*/, DeviceIndex /*peer*/) const {
  return true;  // every emulated device is this process's memory
}

absl::Status HostBackend::Reduce(BackendStream stream, ReduceOp op, RngDtype dtype, uint64_t dst,
                                 DeviceIndex src_device, uint64_t src, uint64_t count) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (count == 0) return absl::OkStatus();
  const uint64_t element = RngElementSize(dtype);
  if (count > UINT64_MAX / element)
    return absl::InvalidArgumentError(absl::StrCat("reduce: ", count, " elements overflow"));
  GPUMUX_ASSIGN_OR_RETURN(HostView to, Translate(s->device(), dst, count * element));
  GPUMUX_ASSIGN_OR_RETURN(HostView from, Translate(src_device, src, count * element));
  return Submit(*s, stream, [to = std::move(to), from = std::move(from), op, dtype, count] {
    Accumulate(op, dtype, to.data, from.data, count);
  });
}

absl::Status HostBackend::FinishAverage(BackendStream stream, RngDtype dtype, uint64_t data,
                                        uint64_t count, int ranks) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<HostStream> s, FindStream(stream));
  if (count == 0) return absl::OkStatus();
  const uint64_t element = RngElementSize(dtype);
  if (count > UINT64_MAX / element)
    return absl::InvalidArgumentError(absl::StrCat("average: ", count, " elements overflow"));
  GPUMUX_ASSIGN_OR_RETURN(HostView values, Translate(s->device(), data, count * element));
  return Submit(*s, stream, [values = std::move(values), dtype, count, ranks] {
    gpumux::FinishAverage(dtype, values.data, count, ranks);
  });
}

// ---- Pinning ----

absl::StatusOr<HostMemoryView> HostBackend::AccessOnHost(DeviceIndex device, uint64_t address,
                                                         uint64_t bytes) {
  GPUMUX_ASSIGN_OR_RETURN(HostView view, Translate(device, address, bytes));
  return HostMemoryView{std::move(view.mapping), reinterpret_cast<char*>(view.data)};
}

absl::Status HostBackend::PinHostMemory(void* data, uint64_t bytes) {
  if (data == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot pin ", bytes, " bytes at ", data == nullptr ? "null" : "a host pointer",
        ": need a non-null pointer and at least one byte"));
  }
  absl::MutexLock lock(&mu_);
  if (!pinned_.emplace(data, bytes).second) {
    return absl::AlreadyExistsError("host memory at this address is already pinned");
  }
  return absl::OkStatus();
}

absl::Status HostBackend::UnpinHostMemory(void* data) {
  if (data == nullptr) return absl::InvalidArgumentError("cannot unpin a null pointer");
  absl::MutexLock lock(&mu_);
  if (pinned_.erase(data) == 0)
    return absl::NotFoundError("host memory at this address is not pinned");
  return absl::OkStatus();
}

}  // namespace gpumux
