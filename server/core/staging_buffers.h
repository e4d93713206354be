#pragma once

// StagingBuffers: each session's staging buffer, a sealed memory file the
// daemon maps and pins with the backend (cudaHostRegister on CUDA), filed in
// the MemoryFileTable for that session alone, which fetches it from the
// memory socket and maps it, so host<->device copies move their bytes
// through it instead of through messages. A session has at most one
// buffer; asking for a larger one replaces it, and copies still queued on
// the old one keep it mapped until they ran. Thread-safe.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/common/ids.h"
#include "server/backend/device_backend.h"
#include "server/backend/memory_file_table.h"

namespace gpumux {

struct StagingBufferInfo {
  std::string key;  // its memory file's key in the MemoryFileTable
  uint64_t size = 0;
  bool pinned = false;
};

// Bytes of a staging buffer, valid while `keep_alive` is held.
struct StagingBytes {
  uint8_t* data = nullptr;
  std::shared_ptr<void> keep_alive;
};

class StagingBuffers {
 public:
  static constexpr uint64_t kGranularity = uint64_t{2} << 20;
  static constexpr uint64_t kMaxBytes = uint64_t{4} << 30;

  // `backend` and `memory_files` must outlive this.
  StagingBuffers(DeviceBackend* backend, MemoryFileTable* memory_files);
  ~StagingBuffers();
  StagingBuffers(const StagingBuffers&) = delete;
  StagingBuffers& operator=(const StagingBuffers&) = delete;

  void AddSession(SessionId session);
  // The session's buffer, replaced by a new one of `min_size` rounded up to
  // kGranularity when it is smaller (0: the current one, or the smallest).
  // INVALID_ARGUMENT above kMaxBytes; UNAUTHENTICATED for a session not
  // added or removed; RESOURCE_EXHAUSTED when the memory is not there.
  absl::StatusOr<StagingBufferInfo> Get(SessionId session, uint64_t min_size);
  // [offset, offset + size) of the session's buffer. FAILED_PRECONDITION
  // when it has none yet; OUT_OF_RANGE when the range does not fit.
  absl::StatusOr<StagingBytes> Bytes(SessionId session, uint64_t offset, uint64_t size) const;
  // Drops the session's buffer (queued copies keep it until they ran).
  void RemoveSession(SessionId session);

 private:
  class Buffer;

  DeviceBackend* const backend_;
  MemoryFileTable* const memory_files_;
  mutable absl::Mutex mu_;
  uint64_t serial_ ABSL_GUARDED_BY(mu_) = 0;
  // Every added session; null until its first Get.
  absl::flat_hash_map<SessionId, std::shared_ptr<Buffer>> buffers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
