// libgpumux's CUDA path (CUDA builds): segments mapped with
// cudaIpcOpenMemHandle, expandable segments' pages mapped from exported
// descriptors, free fences, and the interop of cuda_interop.h.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cuda_device.h"
#include "client/cuda_free_fence.h"
#include "client/cuda_ipc_mapping.h"
#include "client/cuda_own_work.h"
#include "client/local_event.h"
#include "client/page_book.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/cuda_vmm.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/cuda_interop.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

class CudaIpcMapping final : public MappedSegment {
 public:
  CudaIpcMapping(void* base, uint64_t size, int device)
      : base_(base), size_(size), device_(device) {}
  ~CudaIpcMapping() override {
    CudaDeviceScope scope(device_);
    if (cudaError_t e = cudaIpcCloseMemHandle(base_); e != cudaSuccess) {
      spdlog::warn("gpumux: {}", CudaStatus(e, "cudaIpcCloseMemHandle").ToString());
    }
  }
  void* base() const override { return base_; }
  uint64_t size() const override { return size_; }
  int cuda_device() const override { return device_; }

 private:
  void* const base_;
  const uint64_t size_;
  const int device_;
};

thread_local cudaStream_t t_current_stream = cudaStreamLegacy;

}  // namespace

absl::StatusOr<int> ResolveCudaDevice(absl::string_view pci_bus_id) {
  if (pci_bus_id.empty()) {
    int current = 0;
    if (cudaError_t e = cudaGetDevice(&current); e != cudaSuccess)
      return CudaStatus(e, "cudaGetDevice");
    return current;
  }
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache ABSL_GUARDED_BY(mu) = new absl::flat_hash_map<std::string, int>();
  absl::MutexLock lock(&mu);
  if (auto it = cache->find(pci_bus_id); it != cache->end()) return it->second;
  int device = -1;
  const std::string bus_id(pci_bus_id);
  if (absl::Status found =
          CudaStatus(cudaDeviceGetByPCIBusId(&device, bus_id.c_str()), "cudaDeviceGetByPCIBusId");
      !found.ok()) {
    return absl::NotFoundError(absl::StrCat("no visible CUDA device has PCI bus id ", bus_id, " (",
                                            found.message(), "); check CUDA_VISIBLE_DEVICES"));
  }
  cache->emplace(bus_id, device);
  return device;
}

namespace {

// cuDevicePrimaryCtxGetState through the runtime (nothing links libcuda);
// null where the driver does not give it.
PFN_cuDevicePrimaryCtxGetState_v7000 PrimaryContextState() {
  static const auto state = []() -> PFN_cuDevicePrimaryCtxGetState_v7000 {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t error = cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &found,
                                                               7000, cudaEnableDefault, &result);
#else
    const cudaError_t error =
        cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &found, cudaEnableDefault, &result);
#endif
    if (error != cudaSuccess || result != cudaDriverEntryPointSuccess) return nullptr;
    return reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(found);
  }();
  return state;
}

}  // namespace

absl::Status SynchronizeOwnCudaWork(absl::string_view pci_bus_id) {
  if (pci_bus_id.empty() || !CudaDeviceVisible()) return absl::OkStatus();
  absl::StatusOr<int> device = ResolveCudaDevice(pci_bus_id);
  if (!device.ok()) return absl::OkStatus();  // not visible here: no work of ours there
  // A process that never used the device has no context there, and
  // cudaDeviceSynchronize would create one (hundreds of MiB of device memory).
  // The runtime and driver number devices alike.
  PFN_cuDevicePrimaryCtxGetState_v7000 state = PrimaryContextState();
  unsigned int flags = 0;
  int active = 0;
  if (state == nullptr || state(*device, &flags, &active) != CUDA_SUCCESS || active == 0) {
    return absl::OkStatus();
  }
  CudaDeviceScope scope(*device);
  GPUMUX_RETURN_IF_ERROR(CudaStatus(scope.status(), "cudaSetDevice"));
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

bool CudaDeviceVisible() {
  int count = 0;
  return CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount").ok() && count > 0;
}

absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaIpcMapping(absl::string_view handle,
                                                                  uint64_t size,
                                                                  absl::string_view pci_bus_id) {
  if (!CudaDeviceVisible()) {
    return absl::UnimplementedError(
        "cannot map CUDA IPC memory: no CUDA device is visible to this process "
        "(CUDA_VISIBLE_DEVICES, driver?)");
  }
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC memory handle has ",
                                                   sizeof(cudaIpcMemHandle_t), " bytes, not ",
                                                   handle.size()));
  }
  absl::StatusOr<int> device = ResolveCudaDevice(pci_bus_id);
  if (!device.ok()) return device.status();
  CudaDeviceScope scope(*device);
  if (scope.status() != cudaSuccess) return CudaStatus(scope.status(), "cudaSetDevice");
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  void* base = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&base, ipc, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    return CudaStatus(e, "cudaIpcOpenMemHandle");
  }
  return std::unique_ptr<MappedSegment>(new CudaIpcMapping(base, size, *device));
}

namespace {

// An expandable segment of the CUDA backend mapped here: the range reserved
// in this process's device address space, each page imported from its
// descriptor and mapped at its offset. The imported handles are released
// once mapped: a mapping keeps its memory, and cuMemUnmap lets it go.
class CudaPagedMapping final : public PagedMapping {
 public:
  CudaPagedMapping(uint64_t base, uint64_t size, int device)
      : base_(base), size_(size), device_(device) {}
  ~CudaPagedMapping() override {
    CudaDeviceScope scope(device_);
    for (const auto& [offset, bytes] : book_.All()) Unmap(offset, bytes);
    if (absl::Status freed = cuda_vmm::FreeAddresses(base_, size_); !freed.ok()) {
      spdlog::warn("gpumux: {}", freed.ToString());
    }
  }
  void* base() const override { return reinterpret_cast<void*>(base_); }
  uint64_t size() const override { return size_; }
  int cuda_device() const override { return device_; }

  absl::Status MapPages(const google::protobuf::RepeatedPtrField<v1::PageHandle>& pages,
                        MemoryFileFetcher* memory_files) override {
    CudaDeviceScope scope(device_);
    if (scope.status() != cudaSuccess) return CudaStatus(scope.status(), "cudaSetDevice");
    for (const v1::PageHandle& page : pages) {
      if (page.size() == 0 || page.offset() > size_ || page.size() > size_ - page.offset()) {
        return absl::InvalidArgumentError(
            absl::StrCat("a page of ", page.size(), " bytes at offset ", page.offset(),
                         " does not fit an expandable segment of ", size_, " bytes"));
      }
      const std::string* mapped = book_.KeyAt(page.offset());
      if (mapped != nullptr && *mapped == page.key()) continue;
      GPUMUX_ASSIGN_OR_RETURN(UniqueFd fd, memory_files->FetchDescriptor(page.key(), page.size()));
      GPUMUX_ASSIGN_OR_RETURN(const cuda_vmm::PhysicalHandle handle, cuda_vmm::Import(fd.get()));
      // The daemon unmapped the page there and mapped another (its notice
      // is still on the way: the book skips it): this one goes first.
      if (mapped != nullptr) Unmap(page.offset(), page.size());
      const absl::Status map = cuda_vmm::Map(base_ + page.offset(), page.size(), handle, {device_});
      // Mapped, the memory lives until unmapped; unmapped, it goes now.
      if (absl::Status released = cuda_vmm::Release(handle); !released.ok()) {
        spdlog::warn("gpumux: {}", released.ToString());
      }
      GPUMUX_RETURN_IF_ERROR(map);
      book_.Mapped(page.offset(), page.key(), page.size());
    }
    return absl::OkStatus();
  }

  void UnmapPages(uint64_t offset, uint64_t size) override {
    CudaDeviceScope scope(device_);
    for (const auto& [page, bytes] : book_.Unmapped(offset, size)) Unmap(page, bytes);
  }

 private:
  void Unmap(uint64_t offset, uint64_t size) const {
    if (absl::Status unmapped = cuda_vmm::Unmap(base_ + offset, size); !unmapped.ok()) {
      spdlog::warn("gpumux: {}", unmapped.ToString());
    }
  }

  const uint64_t base_;
  const uint64_t size_;
  const int device_;
  PageBook book_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MappedSegment>> OpenCudaPagedMapping(uint64_t size,
                                                                    absl::string_view pci_bus_id) {
  if (!CudaDeviceVisible()) {
    return absl::UnimplementedError(
        "cannot map CUDA pages: no CUDA device is visible to this process "
        "(CUDA_VISIBLE_DEVICES, driver?)");
  }
  GPUMUX_ASSIGN_OR_RETURN(const int device, ResolveCudaDevice(pci_bus_id));
  CudaDeviceScope scope(device);
  if (scope.status() != cudaSuccess) return CudaStatus(scope.status(), "cudaSetDevice");
  GPUMUX_RETURN_IF_ERROR(cuda_vmm::CheckSupport(device));
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t granularity, cuda_vmm::Granularity(device));
  if (size == 0 || size % granularity != 0) {
    return absl::InvalidArgumentError(absl::StrCat("an expandable segment of ", size,
                                                   " bytes is not a whole number of ", granularity,
                                                   "-byte pages"));
  }
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t base, cuda_vmm::ReserveAddresses(size, granularity));
  return std::unique_ptr<MappedSegment>(new CudaPagedMapping(base, size, device));
}

namespace {

// An interprocess event of a free fence and its handle.
struct Fence {
  cudaEvent_t event = nullptr;
  std::string handle;
};

// Free fences are pooled per CUDA device: each free records its own event,
// so the daemon's wait for it ends when the GPU has run the work queued
// before that free, not before every later one. An event is reused once
// its record completed: the daemon may still look at it then, and sees a
// later record, which only delays the reuse of that block, never hastens
// it.
struct FencePool {
  std::deque<Fence> recorded;  // oldest first
  std::vector<Fence> idle;
};

ABSL_CONST_INIT absl::Mutex fences_mu(absl::kConstInit);
absl::flat_hash_map<int, FencePool>& FencePools() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fences_mu) {
  static auto* pools = new absl::flat_hash_map<int, FencePool>();
  return *pools;
}

// A fence event of `pool` to record: an idle one, the oldest recorded one
// when its work completed, or a new one.
cudaError_t TakeFence(FencePool& pool, Fence* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(fences_mu) {
  if (pool.idle.empty() && !pool.recorded.empty() &&
      cudaEventQuery(pool.recorded.front().event) == cudaSuccess) {
    pool.idle.push_back(pool.recorded.front());
    pool.recorded.pop_front();
  }
  ResetCudaError();  // cudaErrorNotReady is no error
  if (!pool.idle.empty()) {
    *out = pool.idle.back();
    pool.idle.pop_back();
    return cudaSuccess;
  }
  cudaEvent_t event = nullptr;
  cudaIpcEventHandle_t handle;
  cudaError_t error =
      cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming);
  if (error == cudaSuccess) error = cudaIpcGetEventHandle(&handle, event);
  if (error != cudaSuccess) {
    if (event != nullptr) cudaEventDestroy(event);
    return error;
  }
  out->event = event;
  out->handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return cudaSuccess;
}

}  // namespace

void WaitForFreeFences() {
  std::vector<cudaEvent_t> events;
  {
    absl::MutexLock lock(&fences_mu);
    for (const auto& [device, pool] : FencePools()) {
      for (const Fence& fence : pool.recorded) events.push_back(fence.event);
    }
  }
  for (cudaEvent_t event : events) {
    if (cudaError_t e = cudaEventSynchronize(event); e != cudaSuccess) {
      spdlog::warn("gpumux: {}", CudaStatus(e, "waiting for a free fence").ToString());
    }
  }
}

std::string RecordFreeFence(int cuda_device) {
  CudaDeviceScope scope(cuda_device);
  const cudaStream_t stream = t_current_stream;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (scope.status() == cudaSuccess && cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    ResetCudaError();  // e.g. the legacy stream while another captures: the record below reports it
  }
  if (capture != cudaStreamCaptureStatusNone) {
    // A record during graph capture is not a record, and synchronizing would
    // break the capture: as in PyTorch, memory a graph uses must outlive it.
    spdlog::warn(
        "gpumux: a buffer freed while CUDA device {}'s current stream is capturing a graph gets no "
        "fence",
        cuda_device);
    return "";
  }
  cudaError_t error = scope.status();
  Fence fence;
  if (error == cudaSuccess) {
    absl::MutexLock lock(&fences_mu);
    FencePool& pool = FencePools()[cuda_device];
    error = TakeFence(pool, &fence);
    if (error == cudaSuccess) {
      error = cudaEventRecord(fence.event, stream);
      if (error == cudaSuccess) {
        pool.recorded.push_back(fence);
      } else {
        pool.idle.push_back(fence);
      }
    }
  }
  if (error == cudaSuccess) return fence.handle;
  // Without a fence the memory may be reused only once this device is idle.
  spdlog::warn(
      "gpumux: cannot fence a free on CUDA device {} ({}); synchronizing the device instead",
      cuda_device, CudaStatus(error, "recording the free fence").ToString());
  cudaDeviceSynchronize();
  return "";
}

namespace {

// Polls: a blocking cudaEventSynchronize could not notice a daemon that died.
class CudaLocalEvent final : public LocalEvent {
 public:
  explicit CudaLocalEvent(CudaIpcEvent event) : event_(std::move(event)) {}
  HostIpcRecordState Await(std::chrono::nanoseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int round = 0;; ++round) {
      const cudaError_t e = cudaEventQuery(event_.get());
      if (e == cudaSuccess) return HostIpcRecordState::kCompleted;
      if (!CudaNotReady(e)) {
        ResetCudaError();
        return HostIpcRecordState::kAbandoned;
      }
      if (std::chrono::steady_clock::now() >= deadline) return HostIpcRecordState::kPending;
      if (round < 32) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }

 private:
  CudaIpcEvent event_;
};

}  // namespace

std::unique_ptr<LocalEvent> OpenCudaLocalEvent(absl::string_view handle) {
  if (!CudaDeviceVisible()) return nullptr;
  absl::StatusOr<CudaIpcEvent> event = CudaIpcEvent::Open(handle);
  if (!event.ok()) return nullptr;
  return std::make_unique<CudaLocalEvent>(*std::move(event));
}

void SetCurrentCudaStream(cudaStream_t stream) { t_current_stream = stream; }
cudaStream_t CurrentCudaStream() { return t_current_stream; }

absl::StatusOr<CudaIpcEvent> CudaIpcEvent::Open(absl::string_view handle) {
  if (handle.size() != sizeof(cudaIpcEventHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC event handle has ",
                                                   sizeof(cudaIpcEventHandle_t), " bytes, not ",
                                                   handle.size()));
  }
  cudaIpcEventHandle_t ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  cudaEvent_t event = nullptr;
  if (cudaError_t e = cudaIpcOpenEventHandle(&event, ipc); e != cudaSuccess) {
    absl::Status status = CudaStatus(e, "cudaIpcOpenEventHandle");
    return absl::InvalidArgumentError(status.message());
  }
  return CudaIpcEvent(event);
}

CudaIpcEvent::CudaIpcEvent(CudaIpcEvent&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)) {}

CudaIpcEvent& CudaIpcEvent::operator=(CudaIpcEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaIpcEvent::~CudaIpcEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

absl::Status CudaIpcEvent::Wait(cudaStream_t stream) const {
  if (cudaError_t e = cudaStreamWaitEvent(stream, event_, 0); e != cudaSuccess) {
    return CudaStatus(e, "cudaStreamWaitEvent");
  }
  return absl::OkStatus();
}

absl::Status CudaIpcEvent::Synchronize() const {
  if (cudaError_t e = cudaEventSynchronize(event_); e != cudaSuccess)
    return CudaStatus(e, "cudaEventSynchronize");
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaIpcEvent::Query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (CudaNotReady(e)) return false;
  GPUMUX_RETURN_IF_ERROR(CudaStatus(e, "cudaEventQuery"));
  return true;
}

}  // namespace gpumux
