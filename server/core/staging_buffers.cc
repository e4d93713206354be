#include "server/core/staging_buffers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random_hex.h"
#include "common/status_macros.h"
#include "server/backend/host/segment_mapping.h"
#include "server/backend/host/shm_object.h"
#include "server/core/session_registry.h"
#include "spdlog/spdlog.h"

namespace gpumux {

// One buffer: the object, the daemon's mapping, the pin. Unpinned, unmapped
// and unlinked when the last holder (the books or a queued copy) lets go.
class StagingBuffers::Buffer {
 public:
  Buffer(DeviceBackend* backend, std::string name, std::shared_ptr<SegmentMapping> mapping, bool pinned)
      : backend_(backend), name_(std::move(name)), mapping_(std::move(mapping)), pinned_(pinned) {}
  ~Buffer() {
    if (pinned_) {
      absl::Status unpinned = backend_->UnpinHostMemory(mapping_->data());
      if (!unpinned.ok()) spdlog::warn("unpin staging buffer {}: {}", name_, unpinned.ToString());
    }
    // Already unlinked when the session replaced or dropped it; the client
    // may also be gone.
    UnlinkShmObject(name_).IgnoreError();
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  StagingBufferInfo info() const { return StagingBufferInfo{name_, mapping_->size(), pinned_}; }
  uint8_t* data() const { return mapping_->data(); }
  uint64_t size() const { return mapping_->size(); }

 private:
  DeviceBackend* backend_;
  std::string name_;
  std::shared_ptr<SegmentMapping> mapping_;
  bool pinned_;
};

StagingBuffers::StagingBuffers(DeviceBackend* backend, std::string name_stem)
    : backend_(backend), name_stem_(std::move(name_stem)) {}

StagingBuffers::~StagingBuffers() = default;

void StagingBuffers::AddSession(SessionId session) {
  absl::MutexLock lock(&mu_);
  buffers_.emplace(session, nullptr);
}

absl::StatusOr<StagingBufferInfo> StagingBuffers::Get(SessionId session, uint64_t min_size) {
  if (min_size > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a staging buffer of ", min_size,
                                                   " bytes was asked for; the most is ", kMaxBytes));
  }
  uint64_t size = std::max<uint64_t>(min_size, 1);
  size = (size + kGranularity - 1) / kGranularity * kGranularity;
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(session);
    if (it == buffers_.end()) return SessionClosedError(session);
    if (it->second != nullptr && it->second->size() >= min_size) return it->second->info();
    name = absl::StrCat(name_stem_, "-stage-", session.value(), "-", serial_++, "-", RandomHex(4));
  }
  // Creating, mapping and pinning take a while: not under the lock.
  GPUMUX_RETURN_IF_ERROR(CreateShmObject(name, size));
  absl::StatusOr<std::shared_ptr<SegmentMapping>> mapping = SegmentMapping::Map(name, size);
  if (!mapping.ok()) {
    UnlinkShmObject(name).IgnoreError();
    return mapping.status();
  }
  absl::Status pin = backend_->PinHostMemory((*mapping)->data(), size);
  if (!pin.ok()) spdlog::warn("staging buffer {} stays unpinned: {}", name, pin.ToString());
  auto buffer = std::make_shared<Buffer>(backend_, name, *std::move(mapping), pin.ok());
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(session);
  if (it == buffers_.end()) return SessionClosedError(session);  // `buffer` goes unused
  std::shared_ptr<Buffer>& slot = it->second;
  if (slot != nullptr && slot->size() >= min_size) return slot->info();  // a racing call won
  slot = std::move(buffer);
  return slot->info();
}

absl::StatusOr<StagingBytes> StagingBuffers::Bytes(SessionId session, uint64_t offset, uint64_t size) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(session);
  if (it == buffers_.end() || it->second == nullptr) {
    return absl::FailedPreconditionError("this session has no staging buffer: call GetStagingBuffer first");
  }
  const std::shared_ptr<Buffer>& buffer = it->second;
  if (offset > buffer->size() || size > buffer->size() - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset, " + ", size,
                                              ") are outside the staging buffer of ", buffer->size(), " bytes"));
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
