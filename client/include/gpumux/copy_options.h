#pragma once

// Options of the copies, memset and random fills (gpumux/copy.h, random.h),
// kept apart so they can be default arguments there.

#include <cstdint>
#include <optional>

#include "gpumux/stream.h"

namespace gpumux {

// How host bytes travel to or from the daemon.
enum class TransferPath {
  // Inline up to ClientOptions::max_inline_copy bytes, staging above.
  kAuto,
  // In the RPC messages, at most kMaxInlineCopyBytes per call.
  kInline,
  // Through the session's shared-memory staging buffer.
  kStaging,
};

// The daemon's limit on the bytes one inline copy carries.
inline constexpr uint64_t kMaxInlineCopyBytes = uint64_t{64} << 20;

struct CopyOptions {
  // The stream the work is queued on; it must be on the device the work
  // runs on (the destination's, or the source's for device to host).
  // Absent: the calling thread's current stream of that device.
  std::optional<Stream> stream;
  // Return only once the work completed (device to host always does).
  bool wait = false;
  // Return an interprocess Event recorded after the work on its stream.
  bool completion_event = false;
  // Host copies only.
  TransferPath path = TransferPath::kAuto;
};

}  // namespace gpumux
