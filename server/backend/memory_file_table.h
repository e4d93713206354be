#pragma once

// MemoryFileTable: the daemon's shared memory that sessions may fetch from
// the memory socket (common/memory_socket.h), each sealed memory file filed
// under a key of 128 random bits. A key reaches only the sessions the
// daemon gave it to (in a segment handle, a staging buffer, an interprocess
// event handle), and a fetch needs an authenticated session besides, so the
// key is a capability like a CUDA IPC handle: without it nothing can be
// found, and nothing is in the file system to be opened. An entry may also
// be reserved for one session (its staging buffer): any other is refused.
//
// Entries hold the file open (one descriptor each) until removed; the
// creator removes its entry when it lets go of the memory. Thread-safe.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/ids.h"
#include "common/sealed_memory.h"

namespace gpumux {

class MemoryFileTable {
 public:
  // Any authenticated session may fetch an entry filed for kAnySession.
  static constexpr SessionId kAnySession{0};

  // Files `memory` under a new key and returns it.
  std::string Add(std::shared_ptr<const SealedMemory> memory, SessionId reserved_for = kAnySession);
  // Removes the entry; nothing happens for a key not filed.
  void Remove(absl::string_view key);

  // The file under `key` for `session`: NOT_FOUND when no such key is filed
  // (never was, or its memory was released), PERMISSION_DENIED when the
  // entry is reserved for another session.
  absl::StatusOr<std::shared_ptr<const SealedMemory>> Find(absl::string_view key,
                                                           SessionId session) const;

  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const SealedMemory> memory;
    SessionId reserved_for;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
