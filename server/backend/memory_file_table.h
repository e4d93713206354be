#pragma once

// MemoryFileTable: the daemon's shared memory that sessions may fetch from
// the memory socket (common/ipc/memory_socket.h), each sealed memory file filed
// under a key of 128 random bits. A key reaches only the sessions the
// daemon gave it to (in a segment handle, a staging buffer, an interprocess
// event handle), and a fetch needs an authenticated session besides, so the
// key is a capability like a CUDA IPC handle: without it nothing can be
// found, and nothing is in the file system to be opened. An entry may also
// be reserved for one session (its staging buffer): any other is refused.
//
// Entries hold the file open (one descriptor each) until removed; the
// creator removes its entry when it lets go of the memory. Memory that is no
// memory file (a CUDA page, exported as a descriptor of the driver's) is
// filed as an ExportableMemory, which makes a descriptor per fetch.
// Thread-safe.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/sealed_memory.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux {

// Memory the memory socket hands out as a descriptor made for each fetch.
class ExportableMemory {
 public:
  virtual ~ExportableMemory() = default;
  virtual uint64_t size() const = 0;
  // A new descriptor of the memory for another process.
  virtual absl::StatusOr<UniqueFd> Export() const = 0;
};

// What the memory socket sends for a key: a descriptor (borrowed from
// `memory`, or made for this fetch) and the memory's size.
struct FiledDescriptor {
  std::shared_ptr<const SealedMemory> memory;
  UniqueFd exported;
  uint64_t size = 0;
  int fd() const { return memory != nullptr ? memory->fd() : exported.get(); }
};

class MemoryFileTable {
 public:
  // Any authenticated session may fetch an entry filed for kAnySession.
  static constexpr SessionId kAnySession{0};

  // Files `memory` under a new key and returns it.
  std::string Add(std::shared_ptr<const SealedMemory> memory, SessionId reserved_for = kAnySession);
  std::string Add(std::shared_ptr<const ExportableMemory> memory,
                  SessionId reserved_for = kAnySession);
  // Removes the entry; nothing happens for a key not filed.
  void Remove(absl::string_view key);

  // The file under `key` for `session`: NOT_FOUND when no such key is filed
  // (never was, or its memory was released), PERMISSION_DENIED when the
  // entry is reserved for another session.
  // FAILED_PRECONDITION for an ExportableMemory's key.
  absl::StatusOr<std::shared_ptr<const SealedMemory>> Find(absl::string_view key,
                                                           SessionId session) const;
  // What the memory socket sends for `key`: Find's errors, and Export's for
  // an ExportableMemory (which runs outside the table's lock).
  absl::StatusOr<FiledDescriptor> Open(absl::string_view key, SessionId session) const;

  size_t size() const;

 private:
  // Exactly one of `memory` and `exportable` is set.
  struct Entry {
    std::shared_ptr<const SealedMemory> memory;
    std::shared_ptr<const ExportableMemory> exportable;
    SessionId reserved_for;
  };
  std::string AddEntry(Entry entry);
  // The entry under `key` if `session` may have it.
  absl::StatusOr<Entry> Lookup(absl::string_view key, SessionId session) const;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
