// Client's statistics, cache and limit calls (torch.cuda.memory_*); the rest
// of Client is in client.cc. Each first sends queued frees, so results
// reflect buffers already dropped, as after `del x` in torch.

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "client/memory_fraction.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "common/formats/memory_stats.h"
#include "common/formats/memory_summary.h"
#include "gpumux/admin.h"
#include "gpumux/client.h"
#include "gpumux/memory.h"

namespace gpumux {

namespace {

// The stats the daemon keeps for leases too: it is their authority.
bool SegmentLevel(absl::string_view key) {
  return absl::StartsWith(key, "segment.") || absl::StartsWith(key, "reserved_bytes.") ||
         absl::StartsWith(key, "oversize_segments.") || key == "num_device_alloc" ||
         key == "num_device_free" || key == "max_split_size";
}

}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> memory::MemoryStats(
    Client& client, std::optional<DeviceIndex> device_or_current) {
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::MemoryStats");
  return ImplOf(client).SessionStats(device);
}

absl::StatusOr<std::map<std::string, int64_t>> Client::Impl::SessionStats(DeviceIndex device) {
  FlushFreesBeforeCall();
  v1::GetStatsRequest request;
  request.set_device(device.value());
  v1::MemoryStats response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->GetStats(context, request, &response);
  }));
  std::map<std::string, int64_t> stats = FromProto(response);
  // With a stats page the daemon's answer has the client's figures already.
  if (local_ == nullptr || local_->has_stats_page()) return stats;
  // Local allocation: the blocks are the client's, the segments (leases and
  // the daemon's shareable allocations) the daemon's; block-level figures
  // add up (a peak of the sum is at most the sum of the peaks: exact while
  // one side is idle, as when nothing is shareable).
  for (const auto& [key, value] : FlattenMemoryStats(local_->Stats(device))) {
    if (!SegmentLevel(key)) stats[key] += value;
  }
  return stats;
}

absl::StatusOr<int64_t> Client::Impl::Stat(DeviceIndex device, absl::string_view key) {
  GPUMUX_ASSIGN_OR_RETURN(auto stats, memory::MemoryStats(self_, device));
  auto it = stats.find(std::string(key));
  if (it == stats.end()) {
    return absl::InternalError(absl::StrCat("gpumuxd's memory stats lack \"", key, "\""));
  }
  return it->second;
}

absl::StatusOr<int64_t> memory::MemoryAllocated(Client& client,
                                                std::optional<DeviceIndex> device_or_current) {
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::MemoryAllocated");
  return ImplOf(client).Stat(device, "allocated_bytes.all.current");
}
absl::StatusOr<int64_t> memory::MaxMemoryAllocated(Client& client,
                                                   std::optional<DeviceIndex> device_or_current) {
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::MaxMemoryAllocated");
  return ImplOf(client).Stat(device, "allocated_bytes.all.peak");
}
absl::StatusOr<int64_t> memory::MemoryReserved(Client& client,
                                               std::optional<DeviceIndex> device_or_current) {
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::MemoryReserved");
  return ImplOf(client).Stat(device, "reserved_bytes.all.current");
}
absl::StatusOr<int64_t> memory::MaxMemoryReserved(Client& client,
                                                  std::optional<DeviceIndex> device_or_current) {
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::MaxMemoryReserved");
  return ImplOf(client).Stat(device, "reserved_bytes.all.peak");
}

absl::StatusOr<std::string> memory::MemorySummary(Client& client,
                                                  std::optional<DeviceIndex> device_or_current,
                                                  bool abbreviated) {
  auto& impl = ImplOf(client);
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::MemorySummary");
  if (impl.local_ != nullptr) {
    GPUMUX_ASSIGN_OR_RETURN(auto stats, impl.SessionStats(device));
    return FormatMemorySummary(stats, device.value(), abbreviated);
  }
  impl.FlushFreesBeforeCall();
  v1::GetSummaryRequest request;
  request.set_device(device.value());
  request.set_abbreviated(abbreviated);
  v1::MemorySummary response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->GetSummary(context, request, &response);
  }));
  return std::move(*response.mutable_text());
}

absl::StatusOr<std::vector<SegmentInfo>> memory::MemorySnapshot(Client& client,
                                                                std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("memory::MemorySnapshot");
  auto& impl = ImplOf(client);
  impl.FlushFreesBeforeCall();
  v1::GetSnapshotRequest request;
  if (device.has_value()) {
    request.set_device(device->value());
  } else {
    request.set_all_devices(true);
  }
  v1::MemorySnapshot response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->GetSnapshot(context, request, &response);
  }));
  std::vector<SegmentInfo> segments = FromProto(response);
  if (impl.local_ == nullptr) return segments;
  // The daemon lists leases without blocks: they are in the local allocator.
  absl::flat_hash_map<std::pair<int32_t, uint64_t>, SegmentSnapshot> local;
  for (SegmentSnapshot& s : impl.local_->Snapshot(device)) {
    const std::pair<int32_t, uint64_t> key(s.device.value(), s.address);
    local.emplace(key, std::move(s));
  }
  for (SegmentInfo& segment : segments) {
    if (!segment.leased) continue;
    auto it = local.find({segment.device, segment.address});
    if (it == local.end()) continue;  // returned meanwhile
    const SegmentSnapshot& s = it->second;
    segment.allocated_size = s.allocated_size;
    segment.active_size = s.active_size;
    segment.requested_size = s.requested_size;
    for (const BlockSnapshot& b : s.blocks) {
      BlockInfo& block = segment.blocks.emplace_back();
      block.address = b.address;
      block.size = b.size;
      block.requested_size = b.requested_size;
      block.state = BlockStateName(b.state);
      if (b.state != BlockState::kInactive) block.session_id = client.session_id();
    }
  }
  return segments;
}

absl::Status memory::ResetPeakMemoryStats(Client& client,
                                          std::optional<DeviceIndex> device_or_current) {
  auto& impl = ImplOf(client);
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::ResetPeakMemoryStats");
  impl.FlushFreesBeforeCall();
  v1::ResetStatsRequest request;
  request.set_device(device.value());
  v1::ResetStatsResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->ResetPeakStats(context, request, &response);
  }));
  if (impl.local_ != nullptr) impl.local_->ResetPeakStats(device);
  return absl::OkStatus();
}

absl::Status memory::ResetAccumulatedMemoryStats(Client& client,
                                                 std::optional<DeviceIndex> device_or_current) {
  auto& impl = ImplOf(client);
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::ResetAccumulatedMemoryStats");
  impl.FlushFreesBeforeCall();
  v1::ResetStatsRequest request;
  request.set_device(device.value());
  v1::ResetStatsResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->ResetAccumulatedStats(context, request, &response);
  }));
  if (impl.local_ != nullptr) impl.local_->ResetAccumulatedStats(device);
  return absl::OkStatus();
}

// --- Cache and limits ----------------------------------------------------------

absl::StatusOr<ReleasedCache> memory::EmptyCache(Client& client, const EmptyCacheOptions& options) {
  GPUMUX_PROFILED("memory::EmptyCache");
  auto& impl = ImplOf(client);
  EmptyCacheResult local;
  if (impl.local_ != nullptr) {
    if (options.device.has_value()) {
      GPUMUX_ASSIGN_OR_RETURN(const int count, impl.CachedDeviceCount());
      if (options.device->value() < 0 || options.device->value() >= count) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", options.device->value(), " is out of range [0, ", count, ")"));
      }
    }
    local = impl.local_->EmptyCache(options.device);  // its leases leave with the flush
  }
  impl.FlushFreesBeforeCall();
  if (options.all_sessions) {
    // Every other session's cache, this one's daemon-side cache with them.
    GPUMUX_ASSIGN_OR_RETURN(ReleasedCache result, Admin(impl.address_).EmptyCache(options.device));
    result.released_bytes += local.released_bytes;
    result.released_segments += local.released_segments;
    return result;
  }
  v1::EmptyCacheRequest request;
  if (options.device.has_value()) {
    request.set_device(options.device->value());
  } else {
    request.set_all_devices(true);
  }
  v1::EmptyCacheResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->EmptyCache(context, request, &response);
  }));
  ReleasedCache result;
  result.released_bytes = response.released_bytes() + local.released_bytes;
  result.released_segments = response.released_segments() + local.released_segments;
  return result;
}

absl::Status memory::SetPerProcessMemoryFraction(Client& client, double fraction,
                                                 std::optional<DeviceIndex> device_or_current) {
  auto& impl = ImplOf(client);
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::SetPerProcessMemoryFraction");
  GPUMUX_RETURN_IF_ERROR(ValidateMemoryFraction(fraction));
  impl.FlushFreesBeforeCall();
  v1::SetMemoryLimitRequest request;
  request.set_device(device.value());
  request.set_fraction(fraction);
  v1::SetMemoryLimitResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->SetMemoryLimit(context, request, &response);
  }));
  // The daemon checks every lease against it; the local allocator checks
  // first, so its retry and PyTorch's message are the client's.
  if (impl.local_ != nullptr) impl.local_->SetMemoryLimit(device, response.limit_bytes());
  return absl::OkStatus();
}

absl::Status memory::SetMemoryLimit(Client& client, uint64_t bytes,
                                    std::optional<DeviceIndex> device_or_current) {
  auto& impl = ImplOf(client);
  const DeviceIndex device = device_or_current.value_or(client.CurrentDevice());
  GPUMUX_PROFILED("memory::SetMemoryLimit");
  impl.FlushFreesBeforeCall();
  v1::SetMemoryLimitRequest request;
  request.set_device(device.value());
  if (bytes == 0) {
    request.set_unlimited(true);
  } else {
    request.set_bytes(bytes);
  }
  v1::SetMemoryLimitResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->SetMemoryLimit(context, request, &response);
  }));
  if (impl.local_ != nullptr) impl.local_->SetMemoryLimit(device, response.limit_bytes());
  return absl::OkStatus();
}

}  // namespace gpumux
