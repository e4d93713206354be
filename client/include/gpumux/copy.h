#pragma once

// Copies between the host and device memory and within device memory, and
// memset: cudaMemcpyAsync and cudaMemsetAsync on the daemon's streams, for a
// Client's buffers (options in gpumux/copy_options.h).

#include <cstdint>

#include "absl/status/statusor.h"
#include "gpumux/client.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/event.h"

namespace gpumux {
namespace copy {

// cudaMemcpyAsync and cudaMemsetAsync on the daemon's streams. Offsets and
// sizes are in bytes and must fit the buffers' requested sizes:
// OUT_OF_RANGE otherwise (from the daemon; checked here first when a copy
// takes several calls, so that nothing is copied). Buffers of another
// session are NOT_FOUND (the daemon's). A stream given in the options must
// be this Client's and on the device the work runs on: INVALID_ARGUMENT.
// Each returns the completion Event when options.completion_event asked
// for one, an empty Event otherwise.
//
// Host copies go inline (bytes in the messages, at most 64 MiB per call)
// or through the session's staging buffer, which is obtained and mapped on
// first use (ClientOptions::staging_buffer_size); options.path chooses,
// kAuto by size (ClientOptions::max_inline_copy). Staged copies of one
// Client take turns on the buffer (one lock), and a staged host-to-device
// copy returns once its last chunk is queued: the next staged copy first
// waits for the daemon to have read whatever it overwrites, so `src` and
// the staging buffer may both be reused at once after the call.
//
// Host to device: `size` bytes from `src` to `dst` at `dst_offset`,
// returning once queued (options.wait: completed). `src` may be reused at
// once.
absl::StatusOr<Event> HostToDevice(Client& client, const DeviceBuffer& dst, uint64_t dst_offset,
                                   const void* src, uint64_t size,
                                   const CopyOptions& options = CopyOptions());
// Device to host: `size` bytes of `src` at `src_offset` into `dst`;
// returns once they are there (options.wait is implied). The work runs on
// the source's device.
absl::StatusOr<Event> DeviceToHost(Client& client, void* dst, const DeviceBuffer& src,
                                   uint64_t src_offset, uint64_t size,
                                   const CopyOptions& options = CopyOptions());
// Within and across devices; overlapping ranges are allowed. The work runs
// on a stream of the destination's device. Across devices it first waits
// for the work queued so far on the calling thread's current stream of the
// source's device (one more RPC), as PyTorch's copy_ does; work on other
// streams of that device needs Stream::WaitStream or WaitEvent first.
absl::StatusOr<Event> DeviceToDevice(Client& client, const DeviceBuffer& dst, uint64_t dst_offset,
                                     const DeviceBuffer& src, uint64_t src_offset, uint64_t size,
                                     const CopyOptions& options = CopyOptions());
// Sets `size` bytes of `dst` at `offset` to `value`.
absl::StatusOr<Event> Memset(Client& client, const DeviceBuffer& dst, uint64_t offset,
                             uint8_t value, uint64_t size,
                             const CopyOptions& options = CopyOptions());

}  // namespace copy
}  // namespace gpumux
