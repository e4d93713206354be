// Client's statistics, cache and limit calls (torch.cuda.memory_*); the rest
// of Client is in client.cc. Each first sends queued frees, so results
// reflect buffers already dropped, as after `del x` in torch.

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/memory_fraction.h"
#include "client/proto_conversion.h"
#include "common/status_macros.h"

namespace gpumux {

absl::StatusOr<std::map<std::string, int64_t>> Client::MemoryStats(DeviceIndex device) {
  impl_->FlushFreesBeforeCall();
  v1::GetStatsRequest request;
  request.set_device(device.value());
  v1::MemoryStats response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->GetStats(context, request, &response);
  }));
  return FromProto(response);
}

absl::StatusOr<int64_t> Client::Impl::Stat(DeviceIndex device, absl::string_view key) {
  GPUMUX_ASSIGN_OR_RETURN(auto stats, self_.MemoryStats(device));
  auto it = stats.find(std::string(key));
  if (it == stats.end()) {
    return absl::InternalError(absl::StrCat("gpumuxd's memory stats lack \"", key, "\""));
  }
  return it->second;
}

absl::StatusOr<int64_t> Client::MemoryAllocated(DeviceIndex device) {
  return impl_->Stat(device, "allocated_bytes.all.current");
}
absl::StatusOr<int64_t> Client::MaxMemoryAllocated(DeviceIndex device) {
  return impl_->Stat(device, "allocated_bytes.all.peak");
}
absl::StatusOr<int64_t> Client::MemoryReserved(DeviceIndex device) {
  return impl_->Stat(device, "reserved_bytes.all.current");
}
absl::StatusOr<int64_t> Client::MaxMemoryReserved(DeviceIndex device) {
  return impl_->Stat(device, "reserved_bytes.all.peak");
}

absl::StatusOr<std::string> Client::MemorySummary(DeviceIndex device, bool abbreviated) {
  impl_->FlushFreesBeforeCall();
  v1::GetSummaryRequest request;
  request.set_device(device.value());
  request.set_abbreviated(abbreviated);
  v1::MemorySummary response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->GetSummary(context, request, &response);
  }));
  return std::move(*response.mutable_text());
}

absl::StatusOr<std::vector<SegmentInfo>> Client::MemorySnapshot(std::optional<DeviceIndex> device) {
  impl_->FlushFreesBeforeCall();
  v1::GetSnapshotRequest request;
  if (device.has_value()) {
    request.set_device(device->value());
  } else {
    request.set_all_devices(true);
  }
  v1::MemorySnapshot response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->GetSnapshot(context, request, &response);
  }));
  return FromProto(response);
}

absl::Status Client::ResetPeakMemoryStats(DeviceIndex device) {
  impl_->FlushFreesBeforeCall();
  v1::ResetStatsRequest request;
  request.set_device(device.value());
  v1::ResetStatsResponse response;
  return impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->ResetPeakStats(context, request, &response);
  });
}

absl::Status Client::ResetAccumulatedMemoryStats(DeviceIndex device) {
  impl_->FlushFreesBeforeCall();
  v1::ResetStatsRequest request;
  request.set_device(device.value());
  v1::ResetStatsResponse response;
  return impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->ResetAccumulatedStats(context, request, &response);
  });
}

// --- Cache and limits ----------------------------------------------------------

absl::StatusOr<ReleasedCache> Client::EmptyCache(const EmptyCacheOptions& options) {
  impl_->FlushFreesBeforeCall();
  v1::EmptyCacheRequest request;
  if (options.device.has_value()) {
    request.set_device(options.device->value());
  } else {
    request.set_all_devices(true);
  }
  request.set_all_sessions(options.all_sessions);
  v1::EmptyCacheResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->EmptyCache(context, request, &response);
  }));
  ReleasedCache result;
  result.released_bytes = response.released_bytes();
  result.released_segments = response.released_segments();
  return result;
}

absl::Status Client::SetPerProcessMemoryFraction(double fraction, DeviceIndex device) {
  GPUMUX_RETURN_IF_ERROR(ValidateMemoryFraction(fraction));
  impl_->FlushFreesBeforeCall();
  v1::SetMemoryLimitRequest request;
  request.set_device(device.value());
  request.set_fraction(fraction);
  v1::SetMemoryLimitResponse response;
  return impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->SetMemoryLimit(context, request, &response);
  });
}

absl::Status Client::SetMemoryLimit(uint64_t bytes, DeviceIndex device) {
  impl_->FlushFreesBeforeCall();
  v1::SetMemoryLimitRequest request;
  request.set_device(device.value());
  if (bytes == 0) {
    request.set_unlimited(true);
  } else {
    request.set_bytes(bytes);
  }
  v1::SetMemoryLimitResponse response;
  return impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->memory_stub_->SetMemoryLimit(context, request, &response);
  });
}

}  // namespace gpumux
