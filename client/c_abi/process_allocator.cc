#include "client/c_abi/process_allocator.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/default_address.h"
#include "common/json_writer.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

#ifdef GPUMUX_CLIENT_HAS_CUDA
#include <cuda_runtime_api.h>

#include "client/cuda_interop.h"
#include "common/cuda_status.h"
#endif

namespace gpumux::c_abi {
namespace {

std::string Pointer(const void* ptr) { return absl::StrFormat("%p", ptr); }

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
  // The calling thread's current gpumux stream of the device: a cudaStream_t
  // names no daemon stream.
  GPUMUX_ASSIGN_OR_RETURN(DeviceBuffer buffer, client->Allocate(size, DeviceIndex(device)));
  void* data = buffer.data();
  if (data == nullptr) {
    client->Release(std::move(buffer));
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
  if (stream != entry.stream) entry.recorded_streams.push_back(entry.stream);
  return Release(*client, std::move(entry), stream);
}

absl::Status ProcessAllocator::Release(Client& client, Entry entry, void* free_stream) {
  absl::Status status;
#ifdef GPUMUX_CLIENT_HAS_CUDA
  if (cuda_backend_) {
    // The free fence covers one CUDA stream, the one the block is freed on;
    // the others record_stream named are waited for here. (Waiting for them
    // without blocking needs a fence per stream in libgpumux.)
    for (void* other : entry.recorded_streams) {
      if (other == free_stream) continue;
      absl::Status synced = CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(other)),
                                       absl::StrCat("gpumux_free: waiting for the work on stream ",
                                                    Pointer(other), " that used the block"));
      if (status.ok()) status = synced;
    }
    CudaStreamGuard on(static_cast<cudaStream_t>(free_stream));
    client.Release(std::move(entry.buffer));
    return status;
  }
#else
  (void)free_stream;
#endif
  client.Release(std::move(entry.buffer));
  return status;
}

absl::Status ProcessAllocator::EmptyCache() {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  return client->EmptyCache().status();
}

absl::Status ProcessAllocator::SetMemoryFraction(double fraction, int device) {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_RETURN_IF_ERROR(CheckDevice("gpumux_set_memory_fraction", device));
  return client->SetPerProcessMemoryFraction(fraction, DeviceIndex(device));
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
  GPUMUX_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments, client->MemorySnapshot(device));
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
  absl::MutexLock lock(&table_mu_);
  auto it = table_.find(ptr);
  if (it == table_.end()) return NotAllocatedHere("gpumux_record_stream: ", ptr);
  // On the host backend no CUDA stream touches the memory: nothing to keep.
  if (!cuda_backend_) return absl::OkStatus();
  Entry& entry = it->second;
  if (stream == entry.stream) return absl::OkStatus();
  for (void* recorded : entry.recorded_streams) {
    if (recorded == stream) return absl::OkStatus();
  }
  entry.recorded_streams.push_back(stream);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ProcessAllocator::MemoryStatsJson(int device) {
  GPUMUX_ASSIGN_OR_RETURN(Client * client, Connected());
  GPUMUX_RETURN_IF_ERROR(CheckDevice("gpumux_memory_stats_json", device));
  GPUMUX_ASSIGN_OR_RETURN(auto stats, client->MemoryStats(DeviceIndex(device)));
  JsonWriter json;
  json.BeginObject();
  for (const auto& [key, value] : stats) {
    json.Key(key);
    json.Int(value);
  }
  json.EndObject();
  return json.str();
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
