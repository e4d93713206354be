#include "server/backend/host/host_backend.h"

#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

// Device d's emulated addresses span 4 TiB from EmulatedAddressSpace::kBase +
// d * kSpan. The whole span is handed out first-fit; the memory limit is
// accounted separately, so small segments rounded up to 2 MiB of address
// space never exhaust the limit early.
constexpr uint64_t kAddressBase = EmulatedAddressSpace::kBase;
constexpr uint64_t kAddressSpan = EmulatedAddressSpace::kSpan;
constexpr uint64_t kAlignment = EmulatedAddressSpace::kAlignment;
constexpr uint64_t kSizeGranularity = 512;
constexpr int kMaxDevices = 1024;
constexpr int kMaxStreamWorkers = 256;

}  // namespace

absl::StatusOr<std::unique_ptr<HostBackend>> HostBackend::Create(const Options& options) {
  if (options.device_count < 1 || options.device_count > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host backend: device_count ", options.device_count, " is not in [1, ", kMaxDevices, "]"));
  }
  if (options.device_memory < kAlignment || options.device_memory > kAddressSpan) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host backend: device_memory ", options.device_memory, " bytes is not in [2 MiB, 4 TiB]"));
  }
  if (options.stream_workers < 1 || options.stream_workers > kMaxStreamWorkers) {
    return absl::InvalidArgumentError(absl::StrCat("host backend: stream_workers ",
                                                   options.stream_workers, " is not in [1, ",
                                                   kMaxStreamWorkers, "]"));
  }
  return std::unique_ptr<HostBackend>(new HostBackend(options));
}

HostBackend::HostBackend(const Options& options)
    : options_(options),
      own_memory_files_(options.memory_files == nullptr ? std::make_unique<MemoryFileTable>()
                                                        : nullptr),
      memory_files_(options.memory_files != nullptr ? options.memory_files
                                                    : own_memory_files_.get()),
      stream_pool_(std::make_unique<HostStreamPool>(options.stream_workers, &shutting_down_)) {
  const int workers = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 0; i < options.device_count; ++i) {
    auto device = std::make_unique<Device>();
    device->info.index = DeviceIndex(i);
    device->info.name = absl::StrCat("gpumux host device ", i);
    device->info.total_memory = options.device_memory;
    device->info.multi_processor_count = workers > 0 ? workers : 1;
    absl::MutexLock lock(&device->mu);
    device->addresses =
        EmulatedAddressSpace(kAddressBase + static_cast<uint64_t>(i) * kAddressSpan, kAddressSpan);
    devices_.push_back(std::move(device));
  }
}

HostBackend::~HostBackend() {
  // Drain every stream first: queued work may still touch segments and events.
  shutting_down_.store(true, std::memory_order_relaxed);
  std::vector<std::shared_ptr<HostStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [handle, stream] : streams_) streams.push_back(std::move(stream));
    for (auto& stream : retired_) streams.push_back(std::move(stream));
    streams_.clear();
    retired_.clear();
  }
  for (auto& stream : streams) stream->Stop();
  // Ends: plain records are queued on these very streams, and the pool's
  // watcher gives up interprocess waits now that shutting_down_ is set.
  for (auto& stream : streams) stream->Synchronize();
  streams.clear();
  stream_pool_.reset();  // nothing is left to run: joins its threads
  {
    absl::MutexLock lock(&mu_);
    events_.clear();
    for (const auto& [key, own] : own_ipc_events_) memory_files_->Remove(key);
    own_ipc_events_.clear();
  }
  for (auto& device : devices_) {
    absl::MutexLock lock(&device->mu);
    for (const auto& [address, segment] : device->segments) memory_files_->Remove(segment.key);
    device->segments.clear();
  }
}

const DeviceInfo& HostBackend::device_info(DeviceIndex device) const {
  assert(device.value() >= 0 && device.value() < device_count());
  return devices_[device.value()]->info;
}

absl::StatusOr<uint64_t> HostBackend::FreeMemory(DeviceIndex device) const {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  const Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  return d.info.total_memory - d.used;
}

absl::StatusOr<BackendSegment> HostBackend::AllocateSegment(DeviceIndex device, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (size == 0 || size % kSizeGranularity != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host device ", device.value(), ": segment size ", size,
                     " bytes must be a positive multiple of ", kSizeGranularity));
  }
  Device& d = *devices_[device.value()];
  const uint64_t span = EmulatedAddressSpace::AlignUp(size);
  uint64_t address = 0;
  uint64_t serial = 0;
  {
    absl::MutexLock lock(&d.mu);
    const uint64_t total = d.info.total_memory;
    if (size > total - d.used) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("host device %d: cannot allocate %d bytes: %d of %d bytes free",
                          device.value(), size, total - d.used, total));
    }
    std::optional<uint64_t> taken = d.addresses.Take(size);
    if (!taken.has_value()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "host device %d: cannot allocate %d bytes: no contiguous %d-byte address range left "
          "in the emulated address space (release segments)",
          device.value(), size, span));
    }
    address = *taken;
    d.used += size;
    serial = d.next_serial++;
  }

  // The file is created and backed outside the lock (fallocate touches every
  // page); the reservation above keeps the address and the bytes ours
  // meanwhile.
  if (!options_.backed) {
    absl::MutexLock lock(&d.mu);
    d.segments.emplace(address, Segment{size, nullptr, std::string(), nullptr});
    return BackendSegment{address, size,
                          SegmentHandle{SegmentHandle::Kind::kHostMemfd, std::string()}};
  }
  absl::StatusOr<SealedMemory> memory =
      SealedMemory::Create(absl::StrCat("gpumux-d", device.value(), "-segment-", serial), size);
  absl::MutexLock lock(&d.mu);
  if (!memory.ok()) {
    d.used -= size;
    d.addresses.Give(address, size);
    return absl::Status(memory.status().code(),
                        absl::StrFormat("host device %d: cannot allocate %d bytes: %s",
                                        device.value(), size, memory.status().message()));
  }
  // Released memory goes back even where a client kept the file.
  std::shared_ptr<const SealedMemory> shared = ShareDiscardedOnRelease(*std::move(memory));
  std::string key = memory_files_->Add(shared);
  d.segments.emplace(address, Segment{size, std::move(shared), key, nullptr});
  BackendSegment segment;
  segment.address = address;
  segment.size = size;
  segment.handle = SegmentHandle{SegmentHandle::Kind::kHostMemfd, std::move(key)};
  return segment;
}

absl::Status HostBackend::ReleaseSegment(DeviceIndex device, uint64_t address) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  auto it = d.segments.find(address);
  if (it == d.segments.end()) {
    return absl::NotFoundError(
        absl::StrFormat("host device %d: no segment at address 0x%x", device.value(), address));
  }
  const uint64_t size = it->second.size;
  // No session can fetch it from now on; queued work holding the mapping
  // keeps it, and it is unmapped after the last.
  memory_files_->Remove(it->second.key);
  d.segments.erase(it);
  d.used -= size;
  d.addresses.Give(address, size);
  return absl::OkStatus();
}

absl::Status HostBackend::CheckDevice(DeviceIndex device) const {
  if (device.value() >= 0 && device.value() < device_count()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("host backend: no device ", device.value(),
                                                 "; devices are 0..", device_count() - 1));
}

absl::StatusOr<HostBackend::HostView> HostBackend::Translate(DeviceIndex device, uint64_t address,
                                                             uint64_t bytes) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  if (std::optional<absl::StatusOr<HostView>> in_range = TranslateInRangeLocked(d, address, bytes);
      in_range.has_value()) {
    return *std::move(in_range);
  }
  auto it = d.segments.upper_bound(address);
  if (it != d.segments.begin()) {
    --it;
    const uint64_t offset = address - it->first;
    Segment& segment = it->second;
    if (offset < segment.size && bytes <= segment.size - offset) {
      if (segment.memory == nullptr) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "host device %d: segment at 0x%x has no memory behind it (a backend for trace replay)",
            device.value(), it->first));
      }
      if (segment.mapping == nullptr) {
        // The pages are there already (the file is backed in full).
        GPUMUX_ASSIGN_OR_RETURN(segment.mapping, SegmentMapping::Map(segment.memory));
      }
      return HostView{segment.mapping, segment.mapping->data() + offset};
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "host device %d: %d bytes at 0x%x are not inside one live segment of the device",
      device.value(), bytes, address));
}

}  // namespace gpumux
