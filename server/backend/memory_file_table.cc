#include "server/backend/memory_file_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random_hex.h"

namespace gpumux {

std::string MemoryFileTable::Add(std::shared_ptr<const SealedMemory> memory,
                                 SessionId reserved_for) {
  absl::MutexLock lock(&mu_);
  while (true) {
    std::string key = RandomHex(16);
    if (entries_.try_emplace(key, Entry{memory, reserved_for}).second) return key;
  }
}

void MemoryFileTable::Remove(absl::string_view key) {
  std::shared_ptr<const SealedMemory> doomed;  // closed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  doomed = std::move(it->second.memory);
  entries_.erase(it);
}

absl::StatusOr<std::shared_ptr<const SealedMemory>> MemoryFileTable::Find(absl::string_view key,
                                                                          SessionId session) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("no shared memory is filed under key ", key,
                                            " (released, or never handed out)"));
  }
  const Entry& entry = it->second;
  if (entry.reserved_for != kAnySession && entry.reserved_for != session) {
    return absl::PermissionDeniedError(
        absl::StrCat("the shared memory under key ", key, " belongs to another session"));
  }
  return entry.memory;
}

size_t MemoryFileTable::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace gpumux
