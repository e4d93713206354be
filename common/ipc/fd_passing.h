#pragma once

// File descriptors over a Unix socket (SCM_RIGHTS): a message of a few bytes
// and up to kMaxPassedFds descriptors, sent and received whole. gRPC cannot
// carry descriptors, so shared memory (SealedMemory) reaches a client this
// way, on a side socket next to the gRPC one.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux {

inline constexpr size_t kMaxPassedFds = 16;
inline constexpr size_t kMaxPassedPayload = 4096;

struct PassedMessage {
  std::string payload;
  std::vector<UniqueFd> fds;  // owned by the receiver
};

// Sends `payload` (1 to kMaxPassedPayload bytes) with `fds` (at most
// kMaxPassedFds) as one message on the stream socket `socket`; the
// descriptors stay open here. INVALID_ARGUMENT for sizes out of range; the
// socket's errors otherwise.
absl::Status SendFds(int socket, absl::string_view payload, absl::Span<const int> fds);

// Receives one message sent by SendFds. OUT_OF_RANGE "the peer closed the
// socket" at its end; INVALID_ARGUMENT when the message or its descriptors
// were cut short (more than the limits: what arrived is closed).
absl::StatusOr<PassedMessage> ReceiveFds(int socket);

}  // namespace gpumux
