#include "client/c_abi/process_allocator.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/memory_snapshot_json.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "gpumux/common/default_address.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "spdlog/spdlog.h"

#ifdef GPUMUX_CLIENT_HAS_CUDA
#include <cuda_runtime_api.h>

#include "client/cuda_free_fence.h"
#include "gpumux/cuda_interop.h"
#endif

namespace gpumux::c_abi {
namespace {

std::string Pointer(const void* ptr) { return absl::StrFormat("%p", ptr); }

// A stream argument (a cudaStream_t; any value on the host backend) as the
// key of the process's stream it names.
LocalStream LocalStreamOf(const void* stream) {
  return LocalStream(reinterpret_cast<uintptr_t>(stream));
}

absl::Status NotAllocatedHere(absl::string_view function, const void* ptr) {
  return absl::NotFoundError(absl::StrCat(function, Pointer(ptr),
                                          " was not returned by gpumux_malloc, or was freed "
                                          "already"));
}

// The C ABI runs in local allocation mode unless told otherwise, since that
// is what an allocator hook called for every tensor needs.
absl::StatusOr<AllocationMode> AllocationModeFromEnvironment() {
  const char* env = std::getenv("GPUMUX_ALLOCATION");
  const absl::string_view value = env == nullptr ? "" : env;
  if (value.empty() || value == "local") return AllocationMode::kLocal;
  if (value == "daemon") return AllocationMode::kDaemon;
  return absl::InvalidArgumentError(absl::StrCat(
      "GPUMUX_ALLOCATION=", value, " is neither \"daemon\" nor \"local\" (unset: local)"));
}

}  // namespace

ProcessAllocator& ProcessAllocator::Get() {
  // Leaked on purpose: C callers (PyTorch tearing down tensors) may free
  // after static destructors ran; Shutdown has then emptied it.
  static ProcessAllocator* const instance = new ProcessAllocator();
  return *instance;
}

absl::StatusOr<Client*> ProcessAllocator::Connected() {
  if (Client* client = connected_.load(std::memory_order_acquire)) return client;
  // A mutex rather than std::call_once: a failed connection (no daemon yet)
  // is tried again by the next call.
  absl::MutexLock lock(&connect_mu_);
  if (shut_down_) {
    return absl::FailedPreconditionError(
        "libgpumux_alloc: the process is exiting; its gpumux session has ended and freed "
        "everything");
  }
  if (client_ != nullptr) return client_.get();
  ClientOptions options;
  GPUMUX_ASSIGN_OR_RETURN(options.allocation, AllocationModeFromEnvironment());
  GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                          Client::Connect(DefaultAddress(), options));
  GPUMUX_RETURN_IF_ERROR(client->Init());
  GPUMUX_ASSIGN_OR_RETURN(device_count_, client->DeviceCount());
  cuda_backend_ = client->backend() == "cuda";
  client_ = std::move(client);
  // Registered after the Client (and so gRPC) came up, so it runs before
  // their static destructors do.
  std::atexit([] { ProcessAllocator::Get().Shutdown(); });
  connected_.store(client_.get(), std::memory_order_release);
  return client_.get();
}

absl::Status ProcessAllocator::CheckDevice(absl::string_view function, int device) const {
  if (device >= 0 && device < device_count_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(function, ": device ", device,
                                                 " is out of range [0, ", device_count_,
                                                 "): gpumuxd serves ", device_count_, " devices"));
}

absl::Status ProcessAllocator::Init(int device_count) {
  if (device_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpumux_init: device_count ", device_count, " is negative"));
  }
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  if (device_count > device_count_) {
    return absl::FailedPreconditionError(
        absl::StrCat("gpumux_init: the caller counts ", device_count, " devices but gpumuxd at ",
                     client->address(), " serves ", device_count_, "; allocations on device ",
                     device_count_, " and above will fail"));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> ProcessAllocator::Malloc(uint64_t size, int device, void* stream) {
  if (size == 0) return nullptr;
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_RETURN_IF_ERROR(CheckDevice("gpumux_malloc", device));
  // The block comes from `stream`'s pool; a lease it needs is on the
  // calling thread's current gpumux stream of the device (a cudaStream_t
  // names no daemon stream).
  AllocateOptions options;
  options.local_stream = LocalStreamOf(stream);
  GPUMUX_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                          memory::Allocate(*client, size, DeviceIndex(device), options));
  void* data = buffer.data();
  if (data == nullptr) {
    memory::Release(*client, std::move(buffer));
    return absl::FailedPreconditionError(
        absl::StrCat("gpumux_malloc: the ", client->backend(),
                     " segment of the allocation cannot be mapped in this process (a CUDA daemon "
                     "needs a libgpumux_alloc built with CUDA)"));
  }
  absl::MutexLock lock(&table_mu_);
  if (table_closed_) {
    // Shutdown ran meanwhile and the client may be gone: leave the buffer
    // to the session's end, which has reclaimed it.
    new DeviceBuffer(std::move(buffer));
    return absl::FailedPreconditionError(
        "gpumux_malloc: the process is exiting; its gpumux session has ended");
  }
  auto [it, inserted] = table_.try_emplace(data);
  if (!inserted) {
    // Two live blocks at one address: the allocator's books are broken.
    spdlog::critical("libgpumux_alloc: gpumux returned {}, which is allocated already",
                     Pointer(data));
    std::abort();
  }
  it->second.buffer = std::move(buffer);
  it->second.stream = stream;
  return data;
}

absl::Status ProcessAllocator::Free(void* ptr, uint64_t size, int device, void* stream) {
  if (ptr == nullptr) return absl::OkStatus();
  Entry entry;
  {
    absl::MutexLock lock(&table_mu_);
    if (table_closed_) return absl::OkStatus();  // freed at exit already
    auto it = table_.find(ptr);
    if (it == table_.end()) {
      return NotAllocatedHere("Trying to free a pointer not allocated here: ", ptr);
    }
    const DeviceBuffer& buffer = it->second.buffer;
    if (buffer.device().value() != device) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpumux_free: ", Pointer(ptr), " was allocated on device ",
                       buffer.device().value(), ", not device ", device, "; nothing was freed"));
    }
    if (buffer.size() != size) {
      return absl::InvalidArgumentError(absl::StrCat("gpumux_free: ", Pointer(ptr),
                                                     " was allocated with size ", buffer.size(),
                                                     ", not ", size, "; nothing was freed"));
    }
    entry = std::move(it->second);
    table_.erase(it);
  }
  Client* client = connected_.load(std::memory_order_acquire);
  if (client == nullptr) {
    // Shutdown is under way and may be destroying the client: leave the
    // block to the session's end, which reclaims it.
    new DeviceBuffer(std::move(entry.buffer));
    return absl::OkStatus();
  }
  // PyTorch frees on the allocation's stream; another one used it too.
  if (stream != entry.stream) GPUMUX_RETURN_IF_ERROR(Record(*client, entry, stream));
  return Release(*client, std::move(entry));
}

absl::Status ProcessAllocator::Record(Client& client, Entry& entry, void* stream) {
  if (entry.buffer.local())
    return memory::RecordStream(client, entry.buffer, LocalStreamOf(stream));
  if (stream == entry.stream) return absl::OkStatus();
  for (void* recorded : entry.recorded_streams) {
    if (recorded == stream) return absl::OkStatus();
  }
  entry.recorded_streams.push_back(stream);
  return absl::OkStatus();
}

absl::Status ProcessAllocator::Release(Client& client, Entry entry) {
  if (entry.buffer.local()) {
    // Back to its stream's pool now; its allocator records events on the
    // streams recorded for it.
    memory::Release(client, std::move(entry.buffer));
    return absl::OkStatus();
  }
#ifdef GPUMUX_CLIENT_HAS_CUDA
  if (cuda_backend_) {
    // The daemon reuses the block once a fence on each stream that used it
    // completed: the allocation's (Free adds the calling thread's current
    // stream's) and each recorded one. Nobody waits here.
    std::vector<std::string> fences;
    for (void* other : entry.recorded_streams) {
      CudaStreamGuard on(static_cast<cudaStream_t>(other));
      if (std::string fence = RecordFreeFence(entry.buffer.cuda_device()); !fence.empty()) {
        fences.push_back(std::move(fence));
      }
    }
    CudaStreamGuard on(static_cast<cudaStream_t>(entry.stream));
    if (fences.empty()) {
      memory::Release(client, std::move(entry.buffer));  // batched, with its fence
      return absl::OkStatus();
    }
    return memory::Free(client, std::move(entry.buffer), fences);
  }
#endif
  memory::Release(client, std::move(entry.buffer));
  return absl::OkStatus();
}

absl::Status ProcessAllocator::EmptyCache() {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  return memory::EmptyCache(*client).status();
}

absl::Status ProcessAllocator::SetMemoryFraction(double fraction, int device) {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_RETURN_IF_ERROR(CheckDevice("gpumux_set_memory_fraction", device));
  return memory::SetPerProcessMemoryFraction(*client, fraction, DeviceIndex(device));
}

absl::StatusOr<void*> ProcessAllocator::BaseAllocation(void* ptr, size_t* size) {
  if (size == nullptr) {
    return absl::InvalidArgumentError(
        "gpumux_base_allocation: size is NULL; pass where to write the segment's size");
  }
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  DeviceIndex device;
  uint64_t segment_address = 0;
  char* base = nullptr;
  {
    absl::MutexLock lock(&table_mu_);
    auto it = table_.find(ptr);
    if (it == table_.end()) return NotAllocatedHere("gpumux_base_allocation: ", ptr);
    const DeviceBuffer& buffer = it->second.buffer;
    device = buffer.device();
    segment_address = buffer.address() - buffer.offset();
    base = static_cast<char*>(buffer.data()) - buffer.offset();
  }
  GPUMUX_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments,
                          memory::MemorySnapshot(*client, device));
  for (const SegmentInfo& segment : segments) {
    if (segment.address == segment_address) {
      *size = segment.total_size;
      return base;
    }
  }
  return absl::NotFoundError(absl::StrFormat(
      "gpumux_base_allocation: gpumuxd lists no segment at address 0x%x of device %d for %p (was "
      "it freed meanwhile?)",
      segment_address, device.value(), ptr));
}

absl::Status ProcessAllocator::RecordStream(void* ptr, void* stream) {
  GPUMUX_RETURN_IF_ERROR(Connected().status());
  Client* client = connected_.load(std::memory_order_acquire);
  absl::MutexLock lock(&table_mu_);
  auto it = table_.find(ptr);
  if (it == table_.end() || client == nullptr) {
    return NotAllocatedHere("gpumux_record_stream: ", ptr);
  }
  return Record(*client, it->second, stream);
}

absl::StatusOr<std::string> ProcessAllocator::MemoryStatsJson(int device) {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_RETURN_IF_ERROR(CheckDevice("gpumux_memory_stats_json", device));
  GPUMUX_ASSIGN_OR_RETURN(auto stats, memory::MemoryStats(*client, DeviceIndex(device)));
  JsonWriter json;
  json.BeginObject();
  for (const auto& [key, value] : stats) {
    json.Key(key);
    json.Int(value);
  }
  json.EndObject();
  return json.str();
}

absl::StatusOr<std::string> ProcessAllocator::MemorySnapshotJson() {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments, memory::MemorySnapshot(*client));
  return gpumux::MemorySnapshotJson(segments);
}

absl::Status ProcessAllocator::ResetPeakStats(int device) {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_RETURN_IF_ERROR(CheckDevice("gpumux_reset_peak_memory_stats", device));
  return memory::ResetPeakMemoryStats(*client, DeviceIndex(device));
}

absl::Status ProcessAllocator::ResetAccumulatedStats(int device) {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_RETURN_IF_ERROR(CheckDevice("gpumux_reset_accumulated_memory_stats", device));
  return memory::ResetAccumulatedMemoryStats(*client, DeviceIndex(device));
}

absl::StatusOr<const char*> ProcessAllocator::Backend() {
  GPUMUX_RETURN_IF_ERROR(Connected().status());
  return cuda_backend_ ? "cuda" : "host";
}

void ProcessAllocator::Shutdown() {
  absl::MutexLock connect_lock(&connect_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  connected_.store(nullptr, std::memory_order_release);
  absl::flat_hash_map<void*, Entry> left;
  {
    absl::MutexLock lock(&table_mu_);
    table_closed_ = true;
    left.swap(table_);
  }
  // The buffers' destructors queue their frees; the Client's sends them and
  // ends the session. A daemon that went away ended it already, and then
  // both return at once.
  left.clear();
  client_.reset();
}

}  // namespace gpumux::c_abi
