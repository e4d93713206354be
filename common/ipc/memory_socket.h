#pragma once

// The memory socket: where a session fetches the shared memory the daemon
// made for it (host-backend segments, its staging buffer, interprocess
// events), as sealed memory files (gpumux/common/sealed_memory.h) passed by
// descriptor. gRPC cannot carry descriptors, so gpumuxd listens on a second
// Unix socket next to its gRPC one, "<socket>.memfd", a SOCK_SEQPACKET
// socket with the same owner, group and mode.
//
// One request per message, one reply per request, in order, on a connection
// the client keeps:
//   request  "gmxmem1 <session_id>:<secret> <key>"
//   reply    "ok <size>" with the memory file's descriptor, or
//            "error <code> <message>" (absl::StatusCode number) without one.
// `key` is the 32 lowercase hex digits the daemon gave out in a handle
// (SegmentHandle.data of HANDLE_KIND_HOST_MEMFD, a PageHandle's key, a
// staging buffer's handle, or the key inside an interprocess event handle);
// a CUDA page's key (HANDLE_KIND_CUDA_PAGES) answers with a descriptor the
// CUDA driver exported for it instead of a memory file. The daemon checks the
// session's credentials, that the connecting process (SO_PEERCRED) has the
// uid the session's first fetch had, and that the session may have the file.
//
// MemoryFileFetcher is the client's side; ParseMemoryRequest and
// FormatMemoryReply the daemon's (server/rpc/memory_socket_server.h).

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/common/sealed_memory.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux {

inline constexpr absl::string_view kMemorySocketSuffix = ".memfd";
inline constexpr absl::string_view kMemoryRequestVersion = "gmxmem1";
inline constexpr size_t kMemoryFileKeyChars = 32;

// The memory socket next to the gRPC socket at `grpc_socket_path`.
std::string MemorySocketPath(absl::string_view grpc_socket_path);

// The Unix socket path of a gRPC target ("unix:///p", "unix:/p", "/p");
// INVALID_ARGUMENT for anything else (a TCP address has no memory socket).
absl::StatusOr<std::string> UnixSocketPathOf(absl::string_view target);

// A new connection to the memory socket at `path`. INVALID_ARGUMENT for a
// path too long for a Unix socket; UNAVAILABLE, naming the path, when
// nothing accepts there.
absl::StatusOr<UniqueFd> ConnectMemorySocket(absl::string_view path);

// FAILED_PRECONDITION: a client that reached gpumuxd by TCP has no memory
// socket, so it can map nothing the daemon shares.
absl::Status NoMemorySocketError();

// True for kMemoryFileKeyChars lowercase hex digits.
bool IsMemoryFileKey(absl::string_view key);

struct MemoryRequest {
  std::string credentials;  // "<session_id>:<secret>", unchecked
  std::string key;
};

std::string FormatMemoryRequest(absl::string_view credentials, absl::string_view key);
// INVALID_ARGUMENT, saying what is wrong, for anything but a well-formed request.
absl::StatusOr<MemoryRequest> ParseMemoryRequest(absl::string_view payload);

// "ok <size>" for an OK status, "error <code> <message>" otherwise (the
// message cut to fit one message).
std::string FormatMemoryReply(const absl::Status& status, uint64_t size);
// The status a reply carries and, for "ok", the size. INTERNAL for a reply
// this code cannot read.
absl::Status ParseMemoryReply(absl::string_view payload, uint64_t* size);

class MemoryFileFetcher {
 public:
  // Fetches for the session `credentials` from the memory socket at
  // `socket_path`; connects on the first Fetch.
  MemoryFileFetcher(std::string socket_path, std::string credentials)
      : socket_path_(std::move(socket_path)), credentials_(std::move(credentials)) {}

  // The memory file filed under `key`, checked to be sealed and exactly
  // `expected_size` bytes. The daemon's status when it refuses (NOT_FOUND
  // for a key it does not know, PERMISSION_DENIED, UNAUTHENTICATED, ...);
  // UNAVAILABLE when the socket cannot be reached; INVALID_ARGUMENT when
  // what arrived is not a sealed file of that size. Thread-safe; requests
  // on one fetcher take turns on its connection.
  absl::StatusOr<SealedMemory> Fetch(absl::string_view key, uint64_t expected_size);
  // The descriptor filed under `key` for memory of `expected_size` bytes,
  // unchecked: a CUDA page's (HANDLE_KIND_CUDA_PAGES), which only the driver
  // can read (cuMemImportFromShareableHandle checks it). Fetch's errors but
  // the last.
  absl::StatusOr<UniqueFd> FetchDescriptor(absl::string_view key, uint64_t expected_size);

  // Connects now unless connected (Fetch does on first use): UNAVAILABLE
  // when the socket cannot be reached.
  absl::Status Connect();
  // Whether a connection is open now.
  bool connected();

  const std::string& socket_path() const { return socket_path_; }

 private:
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string socket_path_;
  const std::string credentials_;
  absl::Mutex mu_;
  UniqueFd socket_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
