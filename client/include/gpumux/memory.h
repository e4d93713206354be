#pragma once

// torch.cuda.memory for a Client's session: allocation and frees, sharing
// between processes, the session's statistics, summary and snapshot, the
// cache and the memory limits. Each function names its torch.cuda
// counterpart; memory::MemoryStats(client, device) is
// torch.cuda.memory_stats(device). Thread-safe, as Client is.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gpumux/client.h"
#include "gpumux/client_options.h"
#include "gpumux/common/ids.h"
#include "gpumux/device_buffer.h"
#include "gpumux/local_streams.h"
#include "gpumux/memory_snapshot.h"
#include "gpumux/stream.h"

namespace gpumux {
namespace memory {

// torch.empty(size, dtype=uint8, device=...) without the tensor: allocates
// `size` bytes and maps their segment. Carries the queued frees, which the
// daemon applies first. Errors: INVALID_ARGUMENT for size 0, a size above
// the device's memory or a bad device; NOT_FOUND for an unknown stream;
// RESOURCE_EXHAUSTED with PyTorch's out-of-memory text; a mapping failure's
// code (the allocation is then freed again).
// INVALID_ARGUMENT (here) for options.stream of another Client or device.
absl::StatusOr<DeviceBuffer> Allocate(Client& client, uint64_t size,
                                      DeviceIndex device = DeviceIndex(0),
                                      const AllocateOptions& options = AllocateOptions());
// Allocate for a caller that must not wait (Python's, holding its
// interpreter lock): the buffer when this process's cache serves it this
// instant (local allocation, not shareable) without a call to the daemon
// and without waiting for another thread; nullopt otherwise, also for a
// request Allocate would refuse. The caller then calls Allocate, which
// says why or waits.
std::optional<DeviceBuffer> TryAllocateCached(Client& client, uint64_t size, DeviceIndex device,
                                              const AllocateOptions& options = AllocateOptions());
// Free on the same terms: true when `buffer`'s block went back to the
// cache at once; false, with `buffer` as it was, when that needs the
// daemon or another thread first (or Free would refuse): call Free.
bool TryFree(Client& client, DeviceBuffer& buffer);
// `del x`: frees `buffer` asynchronously (batched, as its destructor does).
void Release(Client& client, DeviceBuffer&& buffer);
// Frees `buffer` now and returns the daemon's answer. INVALID_ARGUMENT for an
// empty buffer or one of another Client (which is then released to its own
// client); the buffer is consumed either way.
absl::Status Free(Client& client, DeviceBuffer&& buffer);
// Frees `buffer` now; its block is not reused before every interprocess
// event named by `wait_event_handles` (Event::IpcHandle, recorded after the
// last use of the memory) completed. INVALID_ARGUMENT for an empty buffer,
// one of another Client, a handle that is not 64 bytes (all checked here)
// or one that names no event (the daemon's; nothing is freed). On failure
// `buffer` is left as it was, still owning its allocation.
absl::Status Free(Client& client, DeviceBuffer&& buffer,
                  absl::Span<const std::string> wait_event_handles);
// tensor.record_stream(stream): `buffer` is used by work on `stream`, so
// after it is freed its block is not reused before the work queued there
// by then completed. INVALID_ARGUMENT (here) for an empty buffer, a stream
// of another Client or on another device than the buffer; NOT_FOUND for a
// foreign allocation or an unknown stream.
absl::Status RecordStream(Client& client, const DeviceBuffer& buffer, const Stream& stream);
// tensor.record_stream(stream) for a stream of this process (a CUDA
// stream, LocalStream's key its cudaStream_t): after `buffer` is freed its
// block is not reused before the work queued on `stream` by then
// completed, which an event recorded there at the free tells; the free
// does not wait. For a block of the local allocator; a daemon-side one
// (daemon mode, shareable) waits on its free fence instead, and this only
// checks `buffer`. INVALID_ARGUMENT for an empty buffer, NOT_FOUND for one
// of another Client.
absl::Status RecordStream(Client& client, const DeviceBuffer& buffer, LocalStream stream);
// Sends the queued frees now (other memory calls do this first anyway).
absl::Status FlushFrees(Client& client);

// --- Sharing (torch's CUDA IPC tensor sharing, daemon-refcounted) ---
// A single-use token another session can Import. FAILED_PRECONDITION (from
// the daemon) unless `buffer` was allocated shareable.
absl::StatusOr<std::string> Share(Client& client, const DeviceBuffer& buffer);
// This session's own reference to a shared allocation, mapped. The memory
// lives until the last reference is freed. INVALID_ARGUMENT for a malformed
// token, NOT_FOUND for one never issued or whose allocation is gone,
// FAILED_PRECONDITION for one already used (tokens are single-use).
absl::StatusOr<DeviceBuffer> Import(Client& client, absl::string_view token);
// torch.cuda.ipc_collect(): sends queued frees, waits for the free fences
// of this process's CUDA work, then unmaps every segment mapping no live
// DeviceBuffer of this client points into (cached segments of its own and
// segments of imports it freed); says how many mappings and bytes. A later
// allocation in such a segment maps it again.
absl::StatusOr<CollectedMappings> IpcCollect(Client& client);

// --- Statistics (this session's view) ---
// Each takes a device as torch.cuda's do: none (the default) is this
// thread's current device (CurrentDevice), not device 0.
// torch.cuda.memory_allocated(device): allocated_bytes.all.current.
absl::StatusOr<int64_t> MemoryAllocated(Client& client,
                                        std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.max_memory_allocated(device): allocated_bytes.all.peak.
absl::StatusOr<int64_t> MaxMemoryAllocated(Client& client,
                                           std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.memory_reserved(device): reserved_bytes.all.current.
absl::StatusOr<int64_t> MemoryReserved(Client& client,
                                       std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.max_memory_reserved(device): reserved_bytes.all.peak.
absl::StatusOr<int64_t> MaxMemoryReserved(Client& client,
                                          std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.memory_stats(device): PyTorch's 122 keys.
absl::StatusOr<std::map<std::string, int64_t>> MemoryStats(
    Client& client, std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.memory_summary(device, abbreviated): PyTorch's table.
absl::StatusOr<std::string> MemorySummary(Client& client,
                                          std::optional<DeviceIndex> device = std::nullopt,
                                          bool abbreviated = false);
// torch.cuda.memory_snapshot(): this session's segments, sorted by
// (device, address); of one device when given.
absl::StatusOr<std::vector<SegmentInfo>> MemorySnapshot(
    Client& client, std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.reset_peak_memory_stats(device)
absl::Status ResetPeakMemoryStats(Client& client, std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.reset_max_memory_allocated(device): ResetPeakMemoryStats, as
// in PyTorch (which also warns that it resets every peak).
inline absl::Status ResetMaxMemoryAllocated(Client& client,
                                            std::optional<DeviceIndex> device = std::nullopt) {
  return ResetPeakMemoryStats(client, device);
}
// PyTorch's deprecated names of the reserved figures.
// torch.cuda.memory_cached(device)
[[deprecated("use MemoryReserved")]] inline absl::StatusOr<int64_t> MemoryCached(
    Client& client, std::optional<DeviceIndex> device = std::nullopt) {
  return MemoryReserved(client, device);
}
// torch.cuda.max_memory_cached(device)
[[deprecated("use MaxMemoryReserved")]] inline absl::StatusOr<int64_t> MaxMemoryCached(
    Client& client, std::optional<DeviceIndex> device = std::nullopt) {
  return MaxMemoryReserved(client, device);
}
// torch.cuda.reset_max_memory_cached(device)
[[deprecated("use ResetPeakMemoryStats")]] inline absl::Status ResetMaxMemoryCached(
    Client& client, std::optional<DeviceIndex> device = std::nullopt) {
  return ResetPeakMemoryStats(client, device);
}
// torch.cuda.reset_accumulated_memory_stats(device)
absl::Status ResetAccumulatedMemoryStats(Client& client,
                                         std::optional<DeviceIndex> device = std::nullopt);

// --- Cache and limits ---
// torch.cuda.empty_cache(): releases this session's cached, unused segments
// (every session's with options.all_sessions) and says how much.
absl::StatusOr<ReleasedCache> EmptyCache(Client& client,
                                         const EmptyCacheOptions& options = EmptyCacheOptions());
// torch.cuda.set_per_process_memory_fraction(fraction, device): caps the
// bytes reserved for this session on `device` at fraction × total memory.
// INVALID_ARGUMENT "Invalid fraction value: <f>. Allowed range: 0~1" (checked
// here, as PyTorch does) for a fraction outside [0, 1].
absl::Status SetPerProcessMemoryFraction(Client& client, double fraction,
                                         std::optional<DeviceIndex> device = std::nullopt);
// The same cap in bytes; 0 removes it.
absl::Status SetMemoryLimit(Client& client, uint64_t bytes,
                            std::optional<DeviceIndex> device = std::nullopt);

}  // namespace memory
}  // namespace gpumux
