// HostBackend's work on streams: copies, memset and random fills through
// the segment mappings Translate hands out, plus host-memory pinning.

#include "server/backend/host/host_backend.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rng_fill.h"
#include "common/status_macros.h"

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

// ---- Pinning ----

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
