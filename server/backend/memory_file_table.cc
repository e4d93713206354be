#include "server/backend/memory_file_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/random_hex.h"
#include "common/base/status_macros.h"

namespace gpumux {

std::string MemoryFileTable::AddEntry(Entry entry) {
  absl::MutexLock lock(&mu_);
  while (true) {
    std::string key = RandomHex(16);
    if (entries_.try_emplace(key, entry).second) return key;
  }
}

std::string MemoryFileTable::Add(std::shared_ptr<const SealedMemory> memory,
                                 SessionId reserved_for) {
  return AddEntry(Entry{.memory = std::move(memory), .reserved_for = reserved_for});
}

std::string MemoryFileTable::Add(std::shared_ptr<const ExportableMemory> memory,
                                 SessionId reserved_for) {
  return AddEntry(Entry{.exportable = std::move(memory), .reserved_for = reserved_for});
}

void MemoryFileTable::Remove(absl::string_view key) {
  Entry doomed;  // closed (released) outside the lock
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  doomed = std::move(it->second);
  entries_.erase(it);
}

absl::StatusOr<std::shared_ptr<const SealedMemory>> MemoryFileTable::Find(absl::string_view key,
                                                                          SessionId session) const {
  GPUMUX_ASSIGN_OR_RETURN(Entry entry, Lookup(key, session));
  if (entry.memory == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the shared memory under key ", key, " is device memory, not a memory file"));
  }
  return entry.memory;
}

absl::StatusOr<FiledDescriptor> MemoryFileTable::Open(absl::string_view key,
                                                      SessionId session) const {
  GPUMUX_ASSIGN_OR_RETURN(Entry entry, Lookup(key, session));
  FiledDescriptor filed;
  if (entry.memory != nullptr) {
    filed.size = entry.memory->size();
    filed.memory = std::move(entry.memory);
    return filed;
  }
  filed.size = entry.exportable->size();
  GPUMUX_ASSIGN_OR_RETURN(filed.exported, entry.exportable->Export());
  return filed;
}

absl::StatusOr<MemoryFileTable::Entry> MemoryFileTable::Lookup(absl::string_view key,
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
  return entry;
}

size_t MemoryFileTable::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace gpumux
