#include "allocator/caching_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "allocator/device_allocator.h"
#include "common/base/byte_size.h"
#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

using ReleasedSegments = DeviceAllocator::ReleasedSegments;

}  // namespace

CachingAllocator::CachingAllocator(SegmentSource* backend, AllocatorOptions options,
                                   SegmentReleasedCallback on_segment_released)
    : backend_(backend),
      options_(std::move(options)),
      on_segment_released_(std::move(on_segment_released)) {
  for (int i = 0; i < backend_->device_count(); ++i) {
    devices_.push_back(
        std::make_unique<DeviceAllocator>(DeviceIndex(i), backend_, options_, &next_segment_id_));
  }
}

CachingAllocator::~CachingAllocator() = default;

DeviceAllocator& CachingAllocator::DeviceOrDie(DeviceIndex device) const {
  if (device.value() < 0 || device.value() >= device_count()) {
    spdlog::critical("allocator: device {} out of range [0, {})", device.value(), device_count());
    std::abort();
  }
  return *devices_[device.value()];
}

void CachingAllocator::NotifyReleased(DeviceIndex device, const ReleasedSegments& released) const {
  for (const ReleasedMemory& r : released) {
    if (r.size == 0) {
      if (on_segment_released_) on_segment_released_(device, r.segment);
    } else if (on_pages_unmapped_) {
      on_pages_unmapped_(device, r.segment, r.offset, r.size);
    }
  }
}

const char* BlockStateName(BlockState state) {
  switch (state) {
    case BlockState::kActiveAllocated:
      return "active_allocated";
    case BlockState::kActivePendingFree:
      return "active_pending_free";
    case BlockState::kUnknown:
      return "unknown";
    case BlockState::kInactive:
      break;
  }
  return "inactive";
}

std::optional<BlockState> ParseBlockState(absl::string_view name) {
  for (BlockState state :
       {BlockState::kActiveAllocated, BlockState::kActivePendingFree, BlockState::kInactive}) {
    if (name == BlockStateName(state)) return state;
  }
  return std::nullopt;
}

namespace {

// The payload a refusal carries its shortage in: one byte, the enum's value.
constexpr absl::string_view kShortagePayload = "type.gpumux.dev/allocator.Shortage";

}  // namespace

void SetShortage(Shortage shortage, absl::Status& status) {
  status.SetPayload(kShortagePayload, absl::Cord(std::string(1, static_cast<char>(shortage))));
}

Shortage ShortageOf(const absl::Status& status) {
  if (!absl::IsResourceExhausted(status)) return Shortage::kNone;
  absl::optional<absl::Cord> payload = status.GetPayload(kShortagePayload);
  if (!payload.has_value() || payload->size() != 1) return Shortage::kNone;
  const int value = static_cast<unsigned char>((*payload)[0]);
  if (value > static_cast<int>(Shortage::kDevice)) return Shortage::kNone;
  return static_cast<Shortage>(value);
}

absl::Status CachingAllocator::CheckRequest(DeviceIndex device, uint64_t size) const {
  if (device.value() < 0 || device.value() >= device_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU ", device.value(), " does not exist: this node has ", device_count(), " devices"));
  }
  if (size == 0) {
    return absl::InvalidArgumentError("cannot allocate 0 bytes: the size must be at least 1 byte");
  }
  if (size >= kMaxAllocation) {
    return absl::InvalidArgumentError(absl::StrCat("Tried to allocate more than 1EB memory (", size,
                                                   " bytes requested on GPU ", device.value(),
                                                   ")"));
  }
  const uint64_t total = backend_->TotalMemory(device);
  if (size > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot allocate ", size, " bytes (", FormatTorchSize(size), ") on GPU ", device.value(),
        ": it has a total capacity of ", total, " bytes (", FormatTorchSize(total), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<AllocationResult> CachingAllocator::Allocate(DeviceIndex device, ClientId client,
                                                            StreamId stream, uint64_t size,
                                                            bool dedicated, bool count_oom) {
  GPUMUX_RETURN_IF_ERROR(CheckRequest(device, size));
  ReleasedSegments released;
  absl::StatusOr<AllocationResult> result =
      devices_[device.value()]->Allocate(client, stream, size, dedicated, count_oom, &released);
  NotifyReleased(device, released);
  return result;
}

std::optional<AllocationResult> CachingAllocator::TryAllocateCached(DeviceIndex device,
                                                                    ClientId client,
                                                                    StreamId stream,
                                                                    uint64_t size) {
  if (!CheckRequest(device, size).ok()) return std::nullopt;
  return devices_[device.value()]->TryAllocateCached(client, stream, size);
}

absl::StatusOr<AllocationResult> CachingAllocator::AllocateDuringCapture(DeviceIndex device,
                                                                         ClientId client,
                                                                         StreamId stream,
                                                                         uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckRequest(device, size));
  return devices_[device.value()]->AllocateDuringCapture(client, stream, size);
}

absl::StatusOr<AllocationResult> CachingAllocator::Lease(DeviceIndex device, ClientId client,
                                                         StreamId stream, uint64_t size,
                                                         bool small_pool, bool count_oom) {
  GPUMUX_RETURN_IF_ERROR(CheckRequest(device, size));
  if (size % kRoundLarge != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot lease a segment of ", size, " bytes on GPU ", device.value(),
                     ": a segment's size is a multiple of 2 MiB (", kRoundLarge, " bytes)"));
  }
  if (small_pool && size != kSmallBuffer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot lease a small-pool segment of ", size, " bytes on GPU ", device.value(),
        ": small-pool segments are 2 MiB (", kSmallBuffer, " bytes), as PyTorch's are"));
  }
  ReleasedSegments released;
  absl::StatusOr<AllocationResult> result =
      devices_[device.value()]->Lease(client, stream, size, small_pool, count_oom, &released);
  NotifyReleased(device, released);
  return result;
}

void CachingAllocator::CountOom(DeviceIndex device, ClientId client) {
  if (device.value() >= 0 && device.value() < device_count())
    devices_[device.value()]->CountOom(client);
}

void CachingAllocator::SetStatsPublisher(
    std::function<void(DeviceIndex, const DeviceStats&)> publish) {
  for (int d = 0; d < device_count(); ++d) {
    const DeviceIndex device(d);
    devices_[static_cast<size_t>(d)]->SetStatsPublisher(
        publish == nullptr
            ? std::function<void(const DeviceStats&)>()
            : [publish, device](const DeviceStats& stats) { publish(device, stats); });
  }
}

void CachingAllocator::Free(DeviceIndex device, uint64_t address,
                            absl::Span<const BackendEvent> wait_for) {
  FreeBatch(device, absl::MakeConstSpan(&address, 1), wait_for);
}

bool CachingAllocator::TryFree(DeviceIndex device, uint64_t address,
                               absl::Span<const BackendEvent> wait_for) {
  return DeviceOrDie(device).TryFree(address, wait_for);
}

void CachingAllocator::FreeBatch(DeviceIndex device, absl::Span<const uint64_t> addresses,
                                 absl::Span<const BackendEvent> wait_for) {
  ReleasedSegments released;
  DeviceOrDie(device).Free(addresses, wait_for, &released);
  NotifyReleased(device, released);
}

void CachingAllocator::RetireStream(DeviceIndex device, BackendStream backend_stream) {
  DeviceOrDie(device).RetireStream(backend_stream);
}

void CachingAllocator::RecordStream(DeviceIndex device, uint64_t address, StreamId stream,
                                    BackendStream backend_stream, bool even_allocation_stream) {
  DeviceOrDie(device).RecordStream(address, stream, backend_stream, even_allocation_stream);
}

void CachingAllocator::Recharge(DeviceIndex device, uint64_t address, ClientId new_client) {
  DeviceOrDie(device).Recharge(address, new_client);
}

EmptyCacheResult CachingAllocator::EmptyCache(std::optional<DeviceIndex> device,
                                              std::optional<ClientId> client) {
  EmptyCacheResult total;
  for (int i = 0; i < device_count(); ++i) {
    if (device.has_value() && device->value() != i) continue;
    ReleasedSegments released;
    EmptyCacheResult one = devices_[i]->EmptyCache(client, &released);
    NotifyReleased(DeviceIndex(i), released);
    total.released_bytes += one.released_bytes;
    total.released_segments += one.released_segments;
  }
  return total;
}

void CachingAllocator::RemoveClient(ClientId client) {
  for (int i = 0; i < device_count(); ++i) {
    ReleasedSegments released;
    devices_[i]->RemoveClient(client, &released);
    NotifyReleased(DeviceIndex(i), released);
  }
}

void CachingAllocator::SetMemoryLimit(DeviceIndex device, ClientId client, uint64_t limit_bytes) {
  DeviceOrDie(device).SetMemoryLimit(client, limit_bytes);
}

uint64_t CachingAllocator::GetMemoryLimit(DeviceIndex device, ClientId client) const {
  return DeviceOrDie(device).GetMemoryLimit(client);
}

void CachingAllocator::SetClientTenant(ClientId client, const std::string& tenant) {
  for (const std::unique_ptr<DeviceAllocator>& d : devices_) d->SetClientTenant(client, tenant);
}

void CachingAllocator::SetTenantLimit(std::optional<DeviceIndex> device, const std::string& tenant,
                                      uint64_t limit_bytes) {
  if (device.has_value()) {
    DeviceOrDie(*device).SetTenantLimit(tenant, limit_bytes);
    return;
  }
  for (const std::unique_ptr<DeviceAllocator>& d : devices_) d->SetTenantLimit(tenant, limit_bytes);
}

std::vector<TenantUsage> CachingAllocator::ListTenants(std::optional<DeviceIndex> device) const {
  std::vector<TenantUsage> out;
  for (int i = 0; i < device_count(); ++i) {
    if (device.has_value() && device->value() != i) continue;
    devices_[i]->AppendTenants(&out);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TenantUsage& a, const TenantUsage& b) { return a.tenant < b.tenant; });
  return out;
}

DeviceStats CachingAllocator::GetStats(DeviceIndex device) const {
  return DeviceOrDie(device).GetStats();
}

DeviceStats CachingAllocator::GetClientStats(DeviceIndex device, ClientId client) const {
  return DeviceOrDie(device).GetClientStats(client);
}

void CachingAllocator::ResetPeakStats(DeviceIndex device, std::optional<ClientId> client) {
  DeviceOrDie(device).ResetPeakStats(client);
}

void CachingAllocator::ResetAccumulatedStats(DeviceIndex device, std::optional<ClientId> client) {
  DeviceOrDie(device).ResetAccumulatedStats(client);
}

std::vector<SegmentSnapshot> CachingAllocator::Snapshot(std::optional<DeviceIndex> device,
                                                        std::optional<ClientId> client) const {
  std::vector<SegmentSnapshot> out;
  for (int i = 0; i < device_count(); ++i) {
    if (device.has_value() && device->value() != i) continue;
    devices_[i]->AppendSnapshot(client, &out);
  }
  return out;
}

}  // namespace gpumux
