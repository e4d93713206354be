#include "replay/client_target.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gpumux/memory.h"

namespace gpumux {

ClientReplayTarget::ClientReplayTarget(Client& client, DeviceIndex device)
    : client_(client), device_(device) {}

ClientReplayTarget::ClientReplayTarget(Client& client, DeviceIndex device, LocalStreams* streams,
                                       absl::Duration lag)
    : client_(client), device_(device), streams_(streams), lag_(lag) {}

absl::StatusOr<uint64_t> ClientReplayTarget::Allocate(uint64_t size, uint64_t stream) {
  AllocateOptions options;
  options.stream = Stream(client_, device_, StreamId(stream));
  GPUMUX_ASSIGN_OR_RETURN(DeviceBuffer buffer, memory::Allocate(client_, size, device_, options));
  const uint64_t handle = buffer.id().value();
  live_.insert_or_assign(handle, Live{std::move(buffer), stream});
  return handle;
}

absl::Status ClientReplayTarget::Free(uint64_t handle) {
  auto it = live_.find(handle);
  if (it == live_.end()) {
    return absl::NotFoundError(absl::StrCat("replay handle ", handle, " is not live"));
  }
  if (streams_ != nullptr) {
    // The kernels that used the memory, still running when it is freed.
    GPUMUX_RETURN_IF_ERROR(streams_->EnqueueWork(device_, LocalStream(it->second.stream), lag_));
  }
  memory::Release(client_, std::move(it->second.buffer));
  live_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, int64_t>> ClientReplayTarget::Stats() {
  return memory::MemoryStats(client_, device_);
}

}  // namespace gpumux
