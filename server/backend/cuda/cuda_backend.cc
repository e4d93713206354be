#include "server/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/cuda_vmm.h"
#include "common/tensor/rng_fill.h"
#include "server/backend/cuda/fill_random_kernel.h"
#include "spdlog/spdlog.h"

#ifndef GPUMUX_CUDA_ARCH_LIST
#define GPUMUX_CUDA_ARCH_LIST ""
#endif
#ifndef GPUMUX_GENCODE_FLAGS
#define GPUMUX_GENCODE_FLAGS ""
#endif

// Devices, segments, health and the reaper thread. Streams and events are in
// cuda_backend_streams.cc, work on streams in cuda_backend_work.cc.

namespace gpumux {
namespace {

constexpr uint64_t kSizeGranularity = 512;
// Segments are cudaMalloced in whole 2 MiB pages: CUDA IPC maps the whole
// driver allocation behind a pointer, so a smaller segment sub-allocated
// next to another could expose its neighbour's bytes to an importer.
constexpr uint64_t kPage = uint64_t{2} << 20;
// How often the reaper looks at pending keep-alives.
constexpr absl::Duration kKeepAlivePoll = absl::Microseconds(200);

}  // namespace

int CudaBackend::VisibleDeviceCount() {
  int count = 0;
  if (!CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount").ok()) return 0;
  return count;
}

CudaBackend::CudaBackend(const Options& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Options& options) {
  if (options.release_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("CUDA backend: release_grace must not be negative");
  }
  int count = 0;
  if (absl::Status counted = CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      !counted.ok()) {
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", counted.message()));
  }
  if (count == 0)
    return absl::UnavailableError("no CUDA device is visible (CUDA_VISIBLE_DEVICES?)");
  std::unique_ptr<CudaBackend> backend(new CudaBackend(options));
  backend->devices_.reserve(count);
  for (int d = 0; d < count; ++d) backend->devices_.push_back(std::make_unique<Device>());
  GPUMUX_RETURN_IF_ERROR(backend->Init());
#ifdef GPUMUX_HAVE_NCCL
  if (options.nccl) {
    absl::StatusOr<std::unique_ptr<CollectiveEngine>> nccl =
        backend->LoadNccl(options.nccl_library);
    if (nccl.ok()) {
      backend->nccl_ = *std::move(nccl);
    } else {
      backend->nccl_status_ = nccl.status();
    }
  } else {
    backend->nccl_status_ = absl::FailedPreconditionError("NCCL is switched off");
  }
#else
  backend->nccl_status_ =
      absl::UnimplementedError("gpumuxd was built without NCCL (no nccl.h at build time)");
#endif
  backend->reaper_ = std::thread([raw = backend.get()] { raw->RunReaper(); });
  return backend;
}

absl::Status CudaBackend::Init() {
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const std::vector<std::string> arch_list =
      absl::StrSplit(GPUMUX_CUDA_ARCH_LIST, ' ', absl::SkipEmpty());
  for (int d = 0; d < device_count(); ++d) {
    const DeviceIndex index(d);
    Device& device = *devices_[d];
    const auto fail = [d](cudaError_t e, absl::string_view what) {
      return CudaStatus(e, absl::StrCat("CUDA device ", d, ": ", what));
    };
    if (cudaError_t e = cudaSetDevice(d); e != cudaSuccess) return fail(e, "cudaSetDevice");
    // Creates the primary context now (0.2 s), not on the first request.
    if (cudaError_t e = cudaFree(nullptr); e != cudaSuccess) return fail(e, "creating the context");
    cudaDeviceProp prop;
    if (cudaError_t e = cudaGetDeviceProperties(&prop, d); e != cudaSuccess) {
      return fail(e, "cudaGetDeviceProperties");
    }
    char bus_id[32] = {};
    if (cudaError_t e = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), d); e != cudaSuccess) {
      return fail(e, "cudaDeviceGetPCIBusId");
    }
    DeviceInfo& info = device.info;
    info.index = index;
    info.name = prop.name;
    info.total_memory = prop.totalGlobalMem;
    info.major = prop.major;
    info.minor = prop.minor;
    info.multi_processor_count = prop.multiProcessorCount;
    info.pci_bus_id = bus_id;
    info.arch_list = arch_list;
    info.gencode_flags = GPUMUX_GENCODE_FLAGS;
    info.driver_version = driver;
    info.runtime_version = runtime;
    if (cudaError_t e =
            cudaDeviceGetStreamPriorityRange(&device.priorities.least, &device.priorities.greatest);
        e != cudaSuccess) {
      return fail(e, "cudaDeviceGetStreamPriorityRange");
    }
    cudaStream_t internal = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&internal, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return fail(e, "cudaStreamCreateWithFlags");
    }
    device.internal_stream = internal;

    // Warm-up: load the device code and the runtime's memset and IPC paths
    // now, so that the first request is not slow and FreeMemory does not
    // move under a client's feet when the module loads lazily.
    void* scratch = nullptr;
    if (cudaError_t e = cudaMalloc(&scratch, 2 << 20); e != cudaSuccess)
      return fail(e, "warm-up cudaMalloc");
    cudaIpcMemHandle_t handle;
    cudaError_t e = cudaMemsetAsync(scratch, 0, 2 << 20, internal);
    // Every fill kernel, aligned and not: a kernel loaded lazily on first
    // use may wait for the whole context, behind other tenants' work.
    for (int dtype = 0; dtype <= static_cast<int>(RngDtype::kU8) && e == cudaSuccess; ++dtype) {
      for (int kind = 0; kind <= static_cast<int>(RngKind::kBits) && e == cudaSuccess; ++kind) {
        const bool is_int = dtype >= static_cast<int>(RngDtype::kI32);
        if (is_int && kind == static_cast<int>(RngKind::kNormal)) continue;  // no such kernel
        FillRandomLaunch launch;
        launch.dtype = dtype;
        launch.kind = kind;
        launch.elements = 1024;
        for (int misalign : {0, 1}) {
          if (e == cudaSuccess)
            e = LaunchFillRandom(internal, static_cast<char*>(scratch) + misalign, launch);
        }
      }
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(internal);
    if (e == cudaSuccess) e = cudaIpcGetMemHandle(&handle, scratch);
    cudaFree(scratch);
    if (e != cudaSuccess) return fail(e, "warm-up");
    spdlog::info("CUDA device {}: {} (sm_{}{}), {} SMs, {} MiB, PCI {}, priorities [{}, {}]", d,
                 info.name, info.major, info.minor, info.multi_processor_count,
                 info.total_memory >> 20, info.pci_bus_id, device.priorities.greatest,
                 device.priorities.least);
  }
  // Expandable segments where every device has what they need.
  for (int d = 0; d < device_count() && vmm_.ok(); ++d) {
    vmm_ = cuda_vmm::CheckSupport(d);
    absl::StatusOr<uint64_t> granularity =
        vmm_.ok() ? cuda_vmm::Granularity(d) : absl::StatusOr<uint64_t>(vmm_);
    if (granularity.ok() && (*granularity == 0 || kPage % *granularity != 0)) {
      granularity = absl::FailedPreconditionError(
          absl::StrCat("CUDA device ", d, " maps memory in pages of ", *granularity,
                       " bytes, which do not divide 2 MiB"));
    }
    vmm_ = granularity.status();
  }
  if (!vmm_.ok()) {
    spdlog::info("expandable segments are not available: {}", std::string(vmm_.message()));
  }
  // Peer access where the hardware has it: the collectives' reductions then
  // read another device's memory directly instead of copying it over first.
  peer_readable_.assign(static_cast<size_t>(device_count()),
                        std::vector<bool>(static_cast<size_t>(device_count()), false));
  for (int d = 0; d < device_count(); ++d) {
    peer_readable_[d][d] = true;
    for (int peer = 0; peer < device_count(); ++peer) {
      int can = 0;
      if (peer == d || cudaDeviceCanAccessPeer(&can, d, peer) != cudaSuccess || can == 0) continue;
      cudaSetDevice(d);
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) {
        peer_readable_[d][peer] = true;
      } else {
        spdlog::warn("CUDA device {}: peer access to device {} failed: {}", d, peer,
                     cudaGetErrorString(e));
      }
      cudaGetLastError();  // not sticky; clear it
    }
  }
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  nccl_.reset();  // its communicators use the devices' contexts
  {
    absl::MutexLock lock(&reaper_mu_);
    stopping_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
  // After AbandonInterprocessWaits (shutdown) a stream may wait forever on a
  // dead client's event, and cudaDeviceSynchronize and cudaFree would wait
  // with it: the process is exiting, and the driver reclaims everything.
  const bool exiting = abandon_waits_.load();
  for (int d = 0; d < device_count() && !exiting; ++d) {
    Device& device = *devices_[d];
    if (cudaSetDevice(d) != cudaSuccess) continue;
    if (!device.unhealthy.load()) cudaDeviceSynchronize();
  }
  std::vector<KeepAlive> keep_alives;
  {
    absl::MutexLock lock(&reaper_mu_);
    keep_alives.swap(keep_alives_);
  }
  for (KeepAlive& k : keep_alives) cudaEventDestroy(k.done);
  keep_alives.clear();  // may unpin (a staging buffer): before the books go
  absl::flat_hash_map<uint64_t, Event> events;
  absl::flat_hash_map<std::string, IpcEvent> ipc_events;
  {
    absl::MutexLock lock(&mu_);
    streams_.clear();  // cudaStreamDestroy each
    draining_.clear();
    events.swap(events_);
    ipc_events.swap(ipc_events_);
    for (auto& [data, bytes] : pinned_) cudaHostUnregister(data);
    pinned_.clear();
  }
  events.clear();  // destroys the cudaEvents
  ipc_events.clear();
  for (int d = 0; d < device_count() && !exiting; ++d) {
    Device& device = *devices_[d];
    cudaSetDevice(d);
    FreeRetiring(device, absl::InfiniteFuture());
    absl::MutexLock lock(&device.mu);
    for (const auto& [address, segment] : device.segments)
      cudaFree(reinterpret_cast<void*>(address));
    device.segments.clear();
    for (auto& [address, range] : device.ranges) {
      for (uint64_t i = 0; i < range.pages.size(); ++i) {
        const MappedPage& page = range.pages[i];
        if (page.page == nullptr) continue;
        cuda_vmm::Unmap(address + i * range.page_size, range.page_size).IgnoreError();
        if (!page.key.empty()) options_.memory_files->Remove(page.key);
      }
      cuda_vmm::FreeAddresses(address, range.size).IgnoreError();
    }
    device.ranges.clear();  // releases the pages
    if (device.internal_stream != nullptr)
      cudaStreamDestroy(device.internal_stream);  // null: Init failed first
  }
}

const DeviceInfo& CudaBackend::device_info(DeviceIndex device) const {
  return devices_[device.value()]->info;
}

absl::Status CudaBackend::CheckDevice(DeviceIndex device) const {
  if (device.value() >= 0 && device.value() < device_count()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("CUDA backend: no device ", device.value(),
                                                 "; devices are 0..", device_count() - 1));
}

absl::Status CudaBackend::UseDevice(DeviceIndex device) const {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  const Device& d = *devices_[device.value()];
  if (d.unhealthy.load(std::memory_order_acquire)) return DeviceHealth(device);
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device.value()) {
    return Check(device, cudaSetDevice(device.value()), "cudaSetDevice");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Check(DeviceIndex device, int error, absl::string_view what) const {
  const auto e = static_cast<cudaError_t>(error);
  if (e == cudaSuccess) return absl::OkStatus();
  absl::Status status = CudaStatus(e, absl::StrCat("CUDA device ", device.value(), ": ", what));
  if (!IsStickyCudaError(e)) return status;
  Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  if (d.health.ok()) {
    d.health = absl::UnavailableError(absl::StrCat("CUDA device ", device.value(),
                                                   " is unhealthy: ", status.message(),
                                                   "; its context is lost until gpumuxd restarts"));
    d.unhealthy.store(true, std::memory_order_release);
    spdlog::error("{}", std::string(d.health.message()));
  }
  return d.health;
}

absl::Status CudaBackend::DeviceHealth(DeviceIndex device) const {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  const Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  return d.health;
}

absl::StatusOr<uint64_t> CudaBackend::FreeMemory(DeviceIndex device) const {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  size_t free = 0;
  size_t total = 0;
  GPUMUX_RETURN_IF_ERROR(Check(device, cudaMemGetInfo(&free, &total), "cudaMemGetInfo"));
  const Device& d = *devices_[device.value()];
  absl::MutexLock lock(&d.mu);
  return std::min<uint64_t>(free + d.retiring_bytes, d.info.total_memory);
}

absl::StatusOr<BackendSegment> CudaBackend::AllocateSegment(DeviceIndex device, uint64_t size) {
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  if (size == 0 || size % kSizeGranularity != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device.value(), ": segment size ", size,
                     " bytes must be a positive multiple of ", kSizeGranularity));
  }
  Device& d = *devices_[device.value()];
  const uint64_t reserved = (size + kPage - 1) / kPage * kPage;
  if (options_.paged_segments) {
    // One page the size of the range: one descriptor for the whole segment,
    // which an importer maps whole (the allocator's segments are whole 2 MiB
    // multiples).
    if (size != reserved) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA device ", device.value(), ": segment size ", size,
                       " bytes must be a multiple of 2 MiB with paged segments"));
    }
    GPUMUX_ASSIGN_OR_RETURN(BackendRange range,
                            ReserveRange(device, reserved, reserved, StreamId(0), false));
    if (absl::Status mapped = MapPages(device, range.address, reserved); !mapped.ok()) {
      ReleaseRange(device, range.address).IgnoreError();
      return mapped;
    }
    return BackendSegment{range.address, size, std::move(range.handle)};
  }
  void* data = nullptr;
  cudaError_t error = cudaMalloc(&data, reserved);
  if (error == cudaErrorMemoryAllocation) {
    ResetCudaError();
    // Retiring segments give way to a tenant that needs the memory now.
    FreeRetiring(d, absl::InfiniteFuture());
    error = cudaMalloc(&data, reserved);
  }
  if (error == cudaErrorMemoryAllocation) {
    ResetCudaError();
    size_t free = 0;
    size_t total = 0;
    cudaMemGetInfo(&free, &total);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "CUDA device %d: cannot allocate %d bytes: %d of %d bytes free (cudaMalloc: out of memory)",
        device.value(), size, free, total));
  }
  GPUMUX_RETURN_IF_ERROR(Check(device, error, absl::StrCat("cudaMalloc(", reserved, ")")));
  // Zero before anyone sees it (all of it: an importer maps the whole
  // allocation): the bytes may be another tenant's old data.
  cudaIpcMemHandle_t handle;
  error = cudaMemsetAsync(data, 0, reserved, d.internal_stream);
  if (error == cudaSuccess) error = cudaStreamSynchronize(d.internal_stream);
  if (error == cudaSuccess) error = cudaIpcGetMemHandle(&handle, data);
  if (error != cudaSuccess) {
    absl::Status status = Check(device, error, "zeroing and exporting a new segment");
    cudaFree(data);
    return status;
  }
  const auto address = reinterpret_cast<uint64_t>(data);
  {
    absl::MutexLock lock(&d.mu);
    d.segments.emplace(address, Segment{size, reserved});
  }
  BackendSegment segment;
  segment.address = address;
  segment.size = size;
  segment.handle.kind = SegmentHandle::Kind::kCudaIpc;
  segment.handle.data.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  segment.handle.pci_bus_id = d.info.pci_bus_id;
  return segment;
}

absl::Status CudaBackend::ReleaseSegment(DeviceIndex device, uint64_t address) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  Device& d = *devices_[device.value()];
  if (options_.paged_segments) return ReleaseRange(device, address);
  {
    absl::MutexLock lock(&d.mu);
    auto it = d.segments.find(address);
    if (it == d.segments.end()) {
      return absl::NotFoundError(
          absl::StrFormat("CUDA device %d: no segment at address 0x%x", device.value(), address));
    }
    const uint64_t reserved = it->second.reserved;
    d.segments.erase(it);
    if (options_.release_grace > absl::ZeroDuration()) {
      d.retiring.push_back(Retiring{address, reserved, absl::Now() + options_.release_grace});
      d.retiring_bytes += reserved;
    }
  }
  if (options_.release_grace > absl::ZeroDuration()) {
    absl::MutexLock lock(&reaper_mu_);
    reaper_wake_ = true;
    return absl::OkStatus();
  }
  GPUMUX_RETURN_IF_ERROR(UseDevice(device));
  return Check(device, cudaFree(reinterpret_cast<void*>(address)), "cudaFree");
}

void CudaBackend::FreeRetiring(Device& device, absl::Time now) {
  std::vector<Retiring> due;
  {
    absl::MutexLock lock(&device.mu);
    auto keep = std::partition(device.retiring.begin(), device.retiring.end(),
                               [now](const Retiring& r) { return r.free_at > now; });
    due.assign(keep, device.retiring.end());
    device.retiring.erase(keep, device.retiring.end());
    for (const Retiring& r : due) device.retiring_bytes -= r.reserved;
  }
  if (due.empty() || device.unhealthy.load()) return;
  if (!UseDevice(device.info.index).ok()) return;
  for (const Retiring& r : due) {
    absl::Status status =
        Check(device.info.index, cudaFree(reinterpret_cast<void*>(r.address)), "cudaFree");
    if (!status.ok()) spdlog::error("{}", std::string(status.message()));
  }
}

void CudaBackend::ReapKeepAlives() {
  // Held across the whole reap, so a synchronize that reaps returns only
  // once a reap the reaper thread started has dropped what it took.
  absl::MutexLock reaping(&reap_mu_);
  // Dropped outside reaper_mu_: dropping a staging buffer unpins it.
  std::vector<KeepAlive> done;
  {
    absl::MutexLock lock(&reaper_mu_);
    if (keep_alives_.empty()) return;
    auto pending = std::partition(keep_alives_.begin(), keep_alives_.end(), [](const KeepAlive& k) {
      return CudaNotReady(cudaEventQuery(k.done));
    });
    std::move(pending, keep_alives_.end(), std::back_inserter(done));
    keep_alives_.erase(pending, keep_alives_.end());
  }
  for (KeepAlive& k : done) cudaEventDestroy(k.done);
}

void CudaBackend::RunReaper() {
  for (;;) {
    absl::Time next = absl::InfiniteFuture();
    for (const std::unique_ptr<Device>& device : devices_) {
      FreeRetiring(*device, absl::Now());
      absl::MutexLock lock(&device->mu);
      for (const Retiring& r : device->retiring) next = std::min(next, r.free_at);
    }
    ReapKeepAlives();
    absl::MutexLock lock(&reaper_mu_);
    if (stopping_) return;
    if (!keep_alives_.empty()) next = std::min(next, absl::Now() + kKeepAlivePoll);
    const auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(reaper_mu_) {
      return reaper_wake_ || stopping_;
    };
    reaper_mu_.AwaitWithDeadline(absl::Condition(&woken), next);
    reaper_wake_ = false;
  }
}

}  // namespace gpumux
