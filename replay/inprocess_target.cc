#include "replay/inprocess_target.h"

#include <utility>

#include "common/base/status_macros.h"
#include "common/formats/memory_stats.h"

namespace gpumux {
namespace {

constexpr DeviceIndex kDevice(0);
constexpr ClientId kClient(1);

}  // namespace

absl::StatusOr<std::unique_ptr<InProcessTarget>> InProcessTarget::Create(
    const AllocatorOptions& options, uint64_t device_memory) {
  GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<AddressOnlyDevice> device,
                          AddressOnlyDevice::Create(device_memory));
  return std::unique_ptr<InProcessTarget>(new InProcessTarget(std::move(device), options));
}

InProcessTarget::InProcessTarget(std::unique_ptr<AddressOnlyDevice> device,
                                 const AllocatorOptions& options)
    : device_(std::move(device)),
      allocator_(std::make_unique<CachingAllocator>(device_.get(), options)) {}

absl::StatusOr<uint64_t> InProcessTarget::Allocate(uint64_t size, uint64_t stream) {
  GPUMUX_ASSIGN_OR_RETURN(AllocationResult result,
                          allocator_->Allocate(kDevice, kClient, StreamId(stream), size));
  return result.address;
}

absl::Status InProcessTarget::Free(uint64_t handle) {
  allocator_->Free(kDevice, handle);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, int64_t>> InProcessTarget::Stats() {
  std::map<std::string, int64_t> out;
  for (auto& [key, value] : FlattenMemoryStats(allocator_->GetStats(kDevice))) out[key] = value;
  return out;
}

}  // namespace gpumux
