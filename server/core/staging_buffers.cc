#include "server/core/staging_buffers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gpumux/common/sealed_memory.h"
#include "server/core/session_registry.h"
#include "spdlog/spdlog.h"

namespace gpumux {

// One buffer: the memory file, the daemon's mapping, the pin and the
// table entry. Unpinned, unmapped and unfiled when the last holder (the
// books or a queued copy) lets go.
class StagingBuffers::Buffer {
 public:
  Buffer(DeviceBackend* backend, MemoryFileTable* memory_files, std::string key,
         MemoryMapping mapping, bool pinned)
      : backend_(backend),
        memory_files_(memory_files),
        key_(std::move(key)),
        mapping_(std::move(mapping)),
        pinned_(pinned) {}
  ~Buffer() {
    if (pinned_) {
      absl::Status unpinned = backend_->UnpinHostMemory(mapping_.data());
      if (!unpinned.ok()) spdlog::warn("unpin staging buffer: {}", unpinned.ToString());
    }
    memory_files_->Remove(key_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  StagingBufferInfo info() const { return StagingBufferInfo{key_, mapping_.size(), pinned_}; }
  uint8_t* data() const { return static_cast<uint8_t*>(mapping_.data()); }
  uint64_t size() const { return mapping_.size(); }

 private:
  DeviceBackend* backend_;
  MemoryFileTable* memory_files_;
  std::string key_;
  MemoryMapping mapping_;  // unmapped after ~Buffer unpinned it
  bool pinned_;
};

StagingBuffers::StagingBuffers(DeviceBackend* backend, MemoryFileTable* memory_files)
    : backend_(backend), memory_files_(memory_files) {}

StagingBuffers::~StagingBuffers() = default;

void StagingBuffers::AddSession(SessionId session) {
  absl::MutexLock lock(&mu_);
  buffers_.emplace(session, nullptr);
}

absl::StatusOr<StagingBufferInfo> StagingBuffers::Get(SessionId session, uint64_t min_size) {
  if (min_size > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a staging buffer of ", min_size, " bytes was asked for; the most is ", kMaxBytes));
  }
  uint64_t size = std::max<uint64_t>(min_size, 1);
  size = (size + kGranularity - 1) / kGranularity * kGranularity;
  std::string label;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(session);
    if (it == buffers_.end()) return SessionClosedError(session);
    if (it->second != nullptr && it->second->size() >= min_size) return it->second->info();
    label = absl::StrCat("gpumux-staging-", session.value(), "-", serial_++);
  }
  // Creating, backing, mapping and pinning take a while: not under the lock.
  GPUMUX_ASSIGN_OR_RETURN(SealedMemory memory, SealedMemory::Create(label, size));
  GPUMUX_ASSIGN_OR_RETURN(MemoryMapping mapping, memory.Map());
  absl::Status pin = backend_->PinHostMemory(mapping.data(), size);
  if (!pin.ok()) spdlog::warn("staging buffer {} stays unpinned: {}", label, pin.ToString());
  std::string key =
      memory_files_->Add(std::make_shared<const SealedMemory>(std::move(memory)), session);
  auto buffer = std::make_shared<Buffer>(backend_, memory_files_, std::move(key),
                                         std::move(mapping), pin.ok());
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(session);
  if (it == buffers_.end()) return SessionClosedError(session);  // `buffer` goes unused
  std::shared_ptr<Buffer>& slot = it->second;
  if (slot != nullptr && slot->size() >= min_size) return slot->info();  // a racing call won
  slot = std::move(buffer);
  return slot->info();
}

absl::StatusOr<StagingBytes> StagingBuffers::Bytes(SessionId session, uint64_t offset,
                                                   uint64_t size) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(session);
  if (it == buffers_.end() || it->second == nullptr) {
    return absl::FailedPreconditionError(
        "this session has no staging buffer: call GetStagingBuffer first");
  }
  const std::shared_ptr<Buffer>& buffer = it->second;
  if (offset > buffer->size() || size > buffer->size() - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset, " + ", size,
                                              ") are outside the staging buffer of ",
                                              buffer->size(), " bytes"));
  }
  return StagingBytes{buffer->data() + offset, buffer};
}

void StagingBuffers::RemoveSession(SessionId session) {
  std::shared_ptr<Buffer> buffer;
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(session);
  if (it == buffers_.end()) return;
  buffer = std::move(it->second);
  buffers_.erase(it);
}

}  // namespace gpumux
