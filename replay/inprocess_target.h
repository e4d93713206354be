#pragma once

// InProcessTarget: a ReplayTarget over a CachingAllocator in this process,
// on one emulated device the size of an H200 whose segments are addresses
// only (AddressOnlyDevice), so a replay takes no memory for them. Every
// replayed allocation belongs to one client; trace streams map to StreamIds.
// Not thread-safe (a replay is one loop).

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "replay/address_only_device.h"
#include "replay/trace_replay.h"

namespace gpumux {

class InProcessTarget final : public ReplayTarget {
 public:
  static constexpr uint64_t kH200Memory = uint64_t{141} << 30;

  // Errors from AddressOnlyDevice::Create (INVALID_ARGUMENT for a bad size).
  static absl::StatusOr<std::unique_ptr<InProcessTarget>> Create(
      const AllocatorOptions& options, uint64_t device_memory = kH200Memory);

  // Handles are device addresses.
  absl::StatusOr<uint64_t> Allocate(uint64_t size, uint64_t stream) override;
  // Precondition: `handle` came from Allocate and was not freed since.
  absl::Status Free(uint64_t handle) override;
  absl::StatusOr<std::map<std::string, int64_t>> Stats() override;

  CachingAllocator& allocator() { return *allocator_; }

 private:
  InProcessTarget(std::unique_ptr<AddressOnlyDevice> device, const AllocatorOptions& options);

  std::unique_ptr<AddressOnlyDevice> device_;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace gpumux
