#pragma once

// libgpumux: a process's connection to gpumuxd, in the shape of torch.cuda
// (each method names its torch.cuda counterpart). A Client owns one session:
// it opens it on Connect, keeps its stream open (the daemon's liveness signal
// and notice channel) and ends it on destruction, when the daemon releases
// everything the session still holds.
//
// Every fallible call returns the daemon's status code and message; when the
// daemon cannot be reached or went away, UNAVAILABLE "cannot reach gpumuxd at
// <address>: <detail>". Thread-safe: any thread may call any method; the
// current device and streams are per thread (see CurrentDevice).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client_options.h"
#include "client/comm_types.h"
#include "client/copy_options.h"
#include "client/device_buffer.h"
#include "client/device_properties.h"
#include "client/event.h"
#include "client/group_types.h"
#include "client/memory_snapshot.h"
#include "client/nvtx.h"
#include "client/random_options.h"
#include "client/stream.h"
#include "common/default_address.h"
#include "common/host_ipc_event.h"
#include "common/ids.h"
#include "common/profile_data.h"
#include "common/reduce_op.h"

namespace gpumux {

class Client {
 public:
  using Options = ClientOptions;

  // Connects to the daemon at `address` ("unix:///path", "/path" or
  // "host:port") and opens a session: OpenSessionRequest{client_name, pid,
  // tenant, labels}, then waits for SessionOpened; connecting and opening
  // together take at most options.open_timeout. Errors: UNAVAILABLE when the
  // daemon cannot be reached; DEADLINE_EXCEEDED when it does not accept the
  // connection or open the session in time; the daemon's refusal otherwise.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      absl::string_view address = DefaultAddress(), const Options& options = Options());

  // torch.cuda.is_available(): whether a daemon answers at `address` within
  // `timeout` and has at least one device. Never an error: false otherwise.
  // Opens no session.
  static bool IsAvailable(absl::string_view address = DefaultAddress(),
                          absl::Duration timeout = absl::Seconds(2));

  // Sends queued frees, ends the session (the daemon releases what it still
  // holds) and unmaps every segment. All DeviceBuffers of this client must be
  // gone by then.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The address as given to Connect.
  const std::string& address() const;
  SessionId session_id() const;
  const std::string& tenant() const;
  // "host" or "cuda".
  const std::string& backend() const;

  // The host backend's interprocess event `handle` (Event::IpcHandle, or a
  // copy's completion event) mapped into this process: record, query and
  // wait on it without RPCs, as a process recording its own work on it does.
  // Its memory file comes from the daemon's memory socket. FAILED_PRECONDITION
  // on a CUDA daemon (cudaIpcOpenEventHandle opens those) or over TCP;
  // INVALID_ARGUMENT for a malformed handle; NOT_FOUND when it names no live
  // event.
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> MapIpcEvent(absl::string_view handle);
  const std::string& daemon_version() const;
  // The daemon's commit, build type and compiler ("" from a daemon that
  // predates it).
  const std::string& daemon_build() const;

  // True once the session has ended: the daemon went away or ended it. Every
  // call then fails with UNAVAILABLE without reaching the daemon.
  bool session_ended() const;

  // Session.Ping: one round trip that checks the session's credentials.
  absl::Status Ping();

  // --- Devices -----------------------------------------------------------
  // torch.cuda.device_count()
  absl::StatusOr<int> DeviceCount();
  // torch.cuda.get_device_name(device); INVALID_ARGUMENT for a device out of range.
  absl::StatusOr<std::string> GetDeviceName(DeviceIndex device);
  // torch.cuda.get_device_properties(device); INVALID_ARGUMENT as above.
  absl::StatusOr<DeviceProperties> GetDeviceProperties(DeviceIndex device);
  // torch.cuda.synchronize(device): waits for all work queued on the device,
  // the session's on the daemon and, where this process has a CUDA context
  // on it, the process's own kernels (cudaDeviceSynchronize there); then
  // returns the session's asynchronous error there, if any, once (a
  // group collective queued with async_op that failed or did not run).
  absl::Status Synchronize(DeviceIndex device);
  // torch.cuda.get_device_capability(device): {major, minor}; the host
  // backend's devices report {0, 0}. Absent: the current device.
  absl::StatusOr<std::pair<int, int>> GetDeviceCapability(
      std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.get_arch_list(): the architectures the daemon's CUDA build
  // carries code for ("sm_80", "sm_90", "compute_90"); empty for a daemon
  // built without CUDA or with no device.
  absl::StatusOr<std::vector<std::string>> GetArchList();
  // torch.cuda.get_gencode_flags(): "-gencode compute=compute_90,code=sm_90
  // ..." for the same build; empty as above.
  absl::StatusOr<std::string> GetGencodeFlags();

  // torch.cuda.init(): does now what calls otherwise do on first use: learns
  // the device count (SetDevice's range check) and, on a Unix socket,
  // connects the memory socket segments are fetched from. OK when that is
  // done already; UNAVAILABLE when the daemon or its memory socket cannot be
  // reached.
  absl::Status Init();
  // torch.cuda.is_initialized(): whether what Init does is done (by Init, by
  // the calls that needed it, or, with local allocation, by Connect).
  bool IsInitialized() const;

  // torch.cuda.current_blas_handle(): a cuBLAS handle (cublasHandle_t) for
  // the current device and the calling thread, created on first use and
  // bound to the thread's current CUDA stream (cuda_interop.h) on every call.
  // cuBLAS is loaded when first asked (libcublas.so.13, .12, or libcublas.so),
  // so clients that never ask need not have it. The handle lives until the
  // thread exits. FAILED_PRECONDITION on the host backend, in a build without
  // CUDA, or when cuBLAS cannot be loaded; the CUDA or cuBLAS error otherwise.
  absl::StatusOr<void*> CurrentBlasHandle();

  // --- Current device and streams (client_streams.cc) ----------------------
  // Per thread and per Client, as PyTorch keeps them per thread: a thread
  // starts on device 0 with each device's default stream current.
  // torch.cuda.current_device()
  DeviceIndex CurrentDevice() const;
  // torch.cuda.set_device(device). A negative device changes nothing, as in
  // PyTorch; INVALID_ARGUMENT for one past the last (the device count is
  // asked once and remembered).
  absl::Status SetDevice(DeviceIndex device);
  // torch.cuda.default_stream(device): stream 0, this session's own; no RPC.
  Stream DefaultStream(DeviceIndex device) { return Stream(*this, device, StreamId(0)); }
  // torch.cuda.current_stream(device); absent: the current device's.
  Stream CurrentStream(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.set_stream(stream): makes `stream` current on its device, and
  // its device current, as PyTorch does. INVALID_ARGUMENT for a stream of
  // another Client. See also StreamGuard and DeviceGuard (client/guards.h).
  absl::Status SetStream(const Stream& stream);
  // torch.cuda.Stream.priority_range() of `device`. INVALID_ARGUMENT for a
  // device out of range.
  absl::StatusOr<StreamPriorities> GetStreamPriorityRange(DeviceIndex device);
  // torch.cuda.Stream(device, priority): a new stream of this session on
  // `device` (a negative one: the current device). A priority outside the
  // device's range is clamped into it; the Stream reports the one it got.
  // INVALID_ARGUMENT for a device past the last;
  // RESOURCE_EXHAUSTED past the daemon's per-session stream limit.
  absl::StatusOr<Stream> CreateStream(DeviceIndex device, int priority = 0);
  // Destroys a stream this Client created; work already queued still
  // completes. INVALID_ARGUMENT for a default stream (from the daemon) or a
  // stream of another Client; NOT_FOUND for one already destroyed.
  absl::Status DestroyStream(const Stream& stream);

  // --- Events (client_streams.cc; see client/event.h) ----------------------
  // An event created on `device` now rather than on first record.
  // INVALID_ARGUMENT for interprocess with enable_timing or a device out of
  // range; RESOURCE_EXHAUSTED past the per-session event limit.
  absl::StatusOr<Event> CreateEvent(DeviceIndex device,
                                    const EventOptions& options = EventOptions());
  // torch.cuda.Event.from_ipc_handle(device, handle): another session's (or
  // this one's) interprocess event as an Event of this Client, which can be
  // recorded and waited on. INVALID_ARGUMENT "cudaIpcEventHandle_t expects
  // byte-like object of size 64, but got <n>" (checked here, as PyTorch
  // does), or from the daemon for a handle naming no event; NOT_FOUND when
  // the event it names no longer exists.
  absl::StatusOr<Event> OpenEventIpcHandle(DeviceIndex device, absl::string_view handle);

  // --- Allocation --------------------------------------------------------
  // torch.empty(size, dtype=uint8, device=...) without the tensor: allocates
  // `size` bytes and maps their segment. Carries the queued frees, which the
  // daemon applies first. Errors: INVALID_ARGUMENT for size 0, a size above
  // the device's memory or a bad device; NOT_FOUND for an unknown stream;
  // RESOURCE_EXHAUSTED with PyTorch's out-of-memory text; a mapping failure's
  // code (the allocation is then freed again).
  // INVALID_ARGUMENT (here) for options.stream of another Client or device.
  absl::StatusOr<DeviceBuffer> Allocate(uint64_t size, DeviceIndex device = DeviceIndex(0),
                                        const AllocateOptions& options = AllocateOptions());
  // Allocate for a caller that must not wait (Python's, holding its
  // interpreter lock): the buffer when this process's cache serves it this
  // instant (local allocation, not shareable) without a call to the daemon
  // and without waiting for another thread; nullopt otherwise, also for a
  // request Allocate would refuse. The caller then calls Allocate, which
  // says why or waits.
  std::optional<DeviceBuffer> TryAllocateCached(uint64_t size, DeviceIndex device,
                                                const AllocateOptions& options = AllocateOptions());
  // Free on the same terms: true when `buffer`'s block went back to the
  // cache at once; false, with `buffer` as it was, when that needs the
  // daemon or another thread first (or Free would refuse): call Free.
  bool TryFree(DeviceBuffer& buffer);
  // `del x`: frees `buffer` asynchronously (batched, as its destructor does).
  void Release(DeviceBuffer&& buffer);
  // Frees `buffer` now and returns the daemon's answer. INVALID_ARGUMENT for an
  // empty buffer or one of another Client (which is then released to its own
  // client); the buffer is consumed either way.
  absl::Status Free(DeviceBuffer&& buffer);
  // Frees `buffer` now; its block is not reused before every interprocess
  // event named by `wait_event_handles` (Event::IpcHandle, recorded after the
  // last use of the memory) completed. INVALID_ARGUMENT for an empty buffer,
  // one of another Client, a handle that is not 64 bytes (all checked here)
  // or one that names no event (the daemon's; nothing is freed). On failure
  // `buffer` is left as it was, still owning its allocation.
  absl::Status Free(DeviceBuffer&& buffer, absl::Span<const std::string> wait_event_handles);
  // tensor.record_stream(stream): `buffer` is used by work on `stream`, so
  // after it is freed its block is not reused before the work queued there
  // by then completed. INVALID_ARGUMENT (here) for an empty buffer, a stream
  // of another Client or on another device than the buffer; NOT_FOUND for a
  // foreign allocation or an unknown stream.
  absl::Status RecordStream(const DeviceBuffer& buffer, const Stream& stream);
  // tensor.record_stream(stream) for a stream of this process (a CUDA
  // stream, LocalStream's key its cudaStream_t): after `buffer` is freed its
  // block is not reused before the work queued on `stream` by then
  // completed, which an event recorded there at the free tells; the free
  // does not wait. For a block of the local allocator; a daemon-side one
  // (daemon mode, shareable) waits on its free fence instead, and this only
  // checks `buffer`. INVALID_ARGUMENT for an empty buffer, NOT_FOUND for one
  // of another Client.
  absl::Status RecordStream(const DeviceBuffer& buffer, LocalStream stream);
  // Sends the queued frees now (other memory calls do this first anyway).
  absl::Status FlushFrees();

  // --- Sharing (torch's CUDA IPC tensor sharing, daemon-refcounted) -------
  // A single-use token another session can Import. FAILED_PRECONDITION (from
  // the daemon) unless `buffer` was allocated shareable.
  absl::StatusOr<std::string> Share(const DeviceBuffer& buffer);
  // This session's own reference to a shared allocation, mapped. The memory
  // lives until the last reference is freed. INVALID_ARGUMENT for a malformed
  // token, NOT_FOUND for one never issued or whose allocation is gone,
  // FAILED_PRECONDITION for one already used (tokens are single-use).
  absl::StatusOr<DeviceBuffer> Import(absl::string_view token);
  // torch.cuda.ipc_collect(): sends queued frees, waits for the free fences
  // of this process's CUDA work, then unmaps every segment mapping no live
  // DeviceBuffer of this client points into (cached segments of its own and
  // segments of imports it freed); says how many mappings and bytes. A later
  // allocation in such a segment maps it again.
  absl::StatusOr<CollectedMappings> IpcCollect();

  // --- Statistics (this session's view) ----------------------------------
  // Each takes a device as torch.cuda's do: none (the default) is this
  // thread's current device (CurrentDevice), not device 0.
  // torch.cuda.memory_allocated(device): allocated_bytes.all.current.
  absl::StatusOr<int64_t> MemoryAllocated(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.max_memory_allocated(device): allocated_bytes.all.peak.
  absl::StatusOr<int64_t> MaxMemoryAllocated(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.memory_reserved(device): reserved_bytes.all.current.
  absl::StatusOr<int64_t> MemoryReserved(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.max_memory_reserved(device): reserved_bytes.all.peak.
  absl::StatusOr<int64_t> MaxMemoryReserved(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.memory_stats(device): PyTorch's 122 keys.
  absl::StatusOr<std::map<std::string, int64_t>> MemoryStats(
      std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.memory_summary(device, abbreviated): PyTorch's table.
  absl::StatusOr<std::string> MemorySummary(std::optional<DeviceIndex> device = std::nullopt,
                                            bool abbreviated = false);
  // torch.cuda.memory_snapshot(): this session's segments, sorted by
  // (device, address); of one device when given.
  absl::StatusOr<std::vector<SegmentInfo>> MemorySnapshot(
      std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.reset_peak_memory_stats(device)
  absl::Status ResetPeakMemoryStats(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.reset_max_memory_allocated(device): ResetPeakMemoryStats, as
  // in PyTorch (which also warns that it resets every peak).
  absl::Status ResetMaxMemoryAllocated(std::optional<DeviceIndex> device = std::nullopt) {
    return ResetPeakMemoryStats(device);
  }
  // PyTorch's deprecated names of the reserved figures.
  // torch.cuda.memory_cached(device)
  [[deprecated("use MemoryReserved")]] absl::StatusOr<int64_t> MemoryCached(
      std::optional<DeviceIndex> device = std::nullopt) {
    return MemoryReserved(device);
  }
  // torch.cuda.max_memory_cached(device)
  [[deprecated("use MaxMemoryReserved")]] absl::StatusOr<int64_t> MaxMemoryCached(
      std::optional<DeviceIndex> device = std::nullopt) {
    return MaxMemoryReserved(device);
  }
  // torch.cuda.reset_max_memory_cached(device)
  [[deprecated("use ResetPeakMemoryStats")]] absl::Status ResetMaxMemoryCached(
      std::optional<DeviceIndex> device = std::nullopt) {
    return ResetPeakMemoryStats(device);
  }
  // torch.cuda.reset_accumulated_memory_stats(device)
  absl::Status ResetAccumulatedMemoryStats(std::optional<DeviceIndex> device = std::nullopt);

  // --- Cache and limits --------------------------------------------------
  // torch.cuda.empty_cache(): releases this session's cached, unused segments
  // (every session's with options.all_sessions) and says how much.
  absl::StatusOr<ReleasedCache> EmptyCache(const EmptyCacheOptions& options = EmptyCacheOptions());
  // torch.cuda.set_per_process_memory_fraction(fraction, device): caps the
  // bytes reserved for this session on `device` at fraction × total memory.
  // INVALID_ARGUMENT "Invalid fraction value: <f>. Allowed range: 0~1" (checked
  // here, as PyTorch does) for a fraction outside [0, 1].
  absl::Status SetPerProcessMemoryFraction(double fraction,
                                           std::optional<DeviceIndex> device = std::nullopt);
  // The same cap in bytes; 0 removes it.
  absl::Status SetMemoryLimit(uint64_t bytes, std::optional<DeviceIndex> device = std::nullopt);

  // --- Copies and memset (client_copy.cc; options in client/copy_options.h)
  // cudaMemcpyAsync and cudaMemsetAsync on the daemon's streams. Offsets and
  // sizes are in bytes and must fit the buffers' requested sizes:
  // OUT_OF_RANGE otherwise (from the daemon; checked here first when a copy
  // takes several calls, so that nothing is copied). Buffers of another
  // session are NOT_FOUND (the daemon's). A stream given in the options must
  // be this Client's and on the device the work runs on: INVALID_ARGUMENT.
  // Each returns the completion Event when options.completion_event asked
  // for one, an empty Event otherwise.
  //
  // Host copies go inline (bytes in the messages, at most 64 MiB per call)
  // or through the session's staging buffer, which is obtained and mapped on
  // first use (ClientOptions::staging_buffer_size); options.path chooses,
  // kAuto by size (ClientOptions::max_inline_copy). Staged copies of one
  // Client take turns on the buffer (one lock), and a staged host-to-device
  // copy returns once its last chunk is queued: the next staged copy first
  // waits for the daemon to have read whatever it overwrites, so `src` and
  // the staging buffer may both be reused at once after the call.
  //
  // Host to device: `size` bytes from `src` to `dst` at `dst_offset`,
  // returning once queued (options.wait: completed). `src` may be reused at
  // once.
  absl::StatusOr<Event> CopyHostToDevice(const DeviceBuffer& dst, uint64_t dst_offset,
                                         const void* src, uint64_t size,
                                         const CopyOptions& options = CopyOptions());
  // Device to host: `size` bytes of `src` at `src_offset` into `dst`;
  // returns once they are there (options.wait is implied). The work runs on
  // the source's device.
  absl::StatusOr<Event> CopyDeviceToHost(void* dst, const DeviceBuffer& src, uint64_t src_offset,
                                         uint64_t size, const CopyOptions& options = CopyOptions());
  // Within and across devices; overlapping ranges are allowed. The work runs
  // on a stream of the destination's device. Across devices it first waits
  // for the work queued so far on the calling thread's current stream of the
  // source's device (one more RPC), as PyTorch's copy_ does; work on other
  // streams of that device needs Stream::WaitStream or WaitEvent first.
  absl::StatusOr<Event> CopyDeviceToDevice(const DeviceBuffer& dst, uint64_t dst_offset,
                                           const DeviceBuffer& src, uint64_t src_offset,
                                           uint64_t size,
                                           const CopyOptions& options = CopyOptions());
  // Sets `size` bytes of `dst` at `offset` to `value`.
  absl::StatusOr<Event> Memset(const DeviceBuffer& dst, uint64_t offset, uint8_t value,
                               uint64_t size, const CopyOptions& options = CopyOptions());

  // --- Random numbers (client_random.cc): torch.cuda.random ----------------
  // Per session and device a Philox4x32-10 generator with state {seed,
  // offset}. `device` absent: the calling thread's current device. A device
  // out of range is INVALID_ARGUMENT (the daemon's).
  // torch.cuda.manual_seed(seed): offset back to 0.
  absl::Status ManualSeed(uint64_t seed, std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.manual_seed_all(seed)
  absl::Status ManualSeedAll(uint64_t seed);
  // torch.cuda.seed(): a non-deterministic 53-bit seed, set and returned.
  absl::StatusOr<uint64_t> Seed(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.seed_all(): the same fresh seed on every device.
  absl::StatusOr<uint64_t> SeedAll();
  // torch.cuda.initial_seed(): the last seed set.
  absl::StatusOr<uint64_t> InitialSeed(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.get_rng_state(device): 16 bytes, seed then offset (u64 LE).
  absl::StatusOr<std::string> GetRngState(std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.set_rng_state(state, device): 16 bytes, or 8 (seed only).
  // INVALID_ARGUMENT "RNG state is wrong size" or "offset must be a multiple
  // of 4" (the daemon's).
  absl::Status SetRngState(absl::string_view state,
                           std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.get_rng_state_all() / set_rng_state_all(states): one state
  // per device, in order; INVALID_ARGUMENT unless exactly one per device.
  absl::StatusOr<std::vector<std::string>> GetRngStateAll();
  absl::Status SetRngStateAll(absl::Span<const std::string> states);
  // Fills `elements` contiguous values of `dtype` at `offset` bytes into
  // `dst` from the generator of dst's device, advancing its offset by a
  // multiple of 4 as PyTorch does; the bits are common/philox.h's.
  // options.path is ignored. INVALID_ARGUMENT for bad parameters,
  // OUT_OF_RANGE when the values do not fit `dst` (the daemon's).
  absl::StatusOr<GenerateResult> Generate(const DeviceBuffer& dst, uint64_t offset, Dtype dtype,
                                          uint64_t elements, const Distribution& distribution,
                                          const CopyOptions& options = CopyOptions());

  // --- Collectives (client_comm.cc): torch.cuda.comm --------------------
  // Across the daemon's devices, with PyTorch's argument rules and messages
  // (the daemon's). Tensors are contiguous TensorRefs into this Client's
  // buffers (client/comm_types.h); results are new allocations the
  // ResultTensors own, or the caller's own memory where PyTorch returns an
  // input itself. Work is queued on the calling thread's current stream of
  // each device taking part (options.streams names others) and each call
  // returns once it is queued (options.wait: completed). Bad memory is
  // NOT_FOUND or OUT_OF_RANGE; a stream of another Client INVALID_ARGUMENT.
  //
  // comm.broadcast(tensor, devices): one result per device, the input
  // itself on its own device.
  absl::StatusOr<CollectiveResult> Broadcast(const TensorRef& tensor,
                                             absl::Span<const int64_t> devices,
                                             const CollectiveOptions& options = {});
  // comm.broadcast(tensor, out=out): copies into every `out` tensor.
  absl::StatusOr<CollectiveResult> BroadcastOut(const TensorRef& tensor,
                                                absl::Span<const TensorRef> out,
                                                const CollectiveOptions& options = {});
  // comm.broadcast_coalesced(tensors, devices, buffer_size): results device
  // by device (devices.size() × tensors.size(); devices[0]'s are the inputs).
  absl::StatusOr<CollectiveResult> BroadcastCoalesced(
      absl::Span<const TensorRef> tensors, absl::Span<const int64_t> devices,
      uint64_t buffer_size = kDefaultCoalescedBufferSize, const CollectiveOptions& options = {});
  // comm.reduce_add(inputs, destination): the sum on `destination` (absent:
  // the current device); a single input is returned as is.
  absl::StatusOr<CollectiveResult> ReduceAdd(absl::Span<const TensorRef> inputs,
                                             std::optional<DeviceIndex> destination = std::nullopt,
                                             const CollectiveOptions& options = {});
  // comm.reduce_add_coalesced(inputs, destination, buffer_size): `inputs`
  // holds one list per device; one new result per tensor of a list.
  absl::StatusOr<CollectiveResult> ReduceAddCoalesced(
      absl::Span<const std::vector<TensorRef>> inputs,
      std::optional<DeviceIndex> destination = std::nullopt,
      uint64_t buffer_size = kDefaultCoalescedBufferSize, const CollectiveOptions& options = {});
  // comm.scatter(tensor, devices, chunk_sizes, dim, streams): one result per
  // chunk; a chunk that stays on the tensor's device and is contiguous is a
  // view of it. streams[i] (if given and set) copies chunk i: INVALID_ARGUMENT
  // "Expected the device associated with the stream at index i (was X) to
  // match the device supplied at that index (expected Y)" (checked here).
  absl::StatusOr<CollectiveResult> Scatter(
      const TensorRef& tensor, absl::Span<const int64_t> devices,
      const std::optional<std::vector<int64_t>>& chunk_sizes = std::nullopt, int64_t dim = 0,
      absl::Span<const std::optional<Stream>> streams = {}, const CollectiveOptions& options = {});
  // comm.scatter(tensor, dim=dim, streams=streams, out=out).
  absl::StatusOr<CollectiveResult> ScatterOut(const TensorRef& tensor,
                                              absl::Span<const TensorRef> out, int64_t dim = 0,
                                              absl::Span<const std::optional<Stream>> streams = {},
                                              const CollectiveOptions& options = {});
  // comm.gather(tensors, dim, destination): a new tensor on `destination`
  // (absent: the current device).
  absl::StatusOr<CollectiveResult> Gather(absl::Span<const TensorRef> tensors, int64_t dim = 0,
                                          std::optional<DeviceIndex> destination = std::nullopt,
                                          const CollectiveOptions& options = {});
  // comm.gather(tensors, dim, destination="cpu"): the gathered bytes into
  // `dst` (`dst_size` bytes, exactly the result's); returns once they are
  // there. Inline or through the staging buffer as options.path chooses
  // for copies (TransferPath::kAuto by size). Its one result tensor has no
  // buffer: it tells the gathered shape.
  absl::StatusOr<CollectiveResult> GatherToHost(absl::Span<const TensorRef> tensors, void* dst,
                                                uint64_t dst_size, int64_t dim = 0,
                                                const CollectiveOptions& options = {},
                                                TransferPath path = TransferPath::kAuto);
  // comm.gather(tensors, dim, out=out).
  absl::StatusOr<CollectiveResult> GatherOut(absl::Span<const TensorRef> tensors,
                                             const TensorRef& out, int64_t dim = 0,
                                             const CollectiveOptions& options = {});
  // torch.cuda.nccl.all_reduce(tensors, op=op): in place, one tensor per
  // device ("inputs must be on unique devices").
  absl::StatusOr<CollectiveResult> AllReduce(absl::Span<const TensorRef> tensors,
                                             ReduceOp op = ReduceOp::kSum,
                                             const CollectiveOptions& options = {});
  // torch.cuda.nccl.all_reduce(inputs, outputs, op).
  absl::StatusOr<CollectiveResult> AllReduceOut(absl::Span<const TensorRef> inputs,
                                                absl::Span<const TensorRef> outputs,
                                                ReduceOp op = ReduceOp::kSum,
                                                const CollectiveOptions& options = {});

  // --- Groups of daemons (client_group.cc): torch.distributed ----------
  // Daemons on several nodes form a named group; a client on each node then
  // runs collectives on its own memory under the group's name, every member
  // the same ones in the same order (torch.distributed's rule). Groups
  // outlive the sessions that use them. Each collective returns once the
  // result is in the tensor (the work queued before it on the tensor's
  // stream ran first). A member daemon that died or cannot be reached fails
  // it with UNAVAILABLE naming the peer, within the group's timeout; the
  // group is then broken (FAILED_PRECONDITION) until formed again.
  //
  // Joins this client's daemon to a group and waits until every rank
  // joined and connected; forming a group of the same name again replaces
  // it.
  absl::StatusOr<DaemonGroupInfo> FormGroup(const FormGroupOptions& options);
  // Closes the daemon's group `name` (NOT_FOUND for none).
  absl::Status DestroyGroup(absl::string_view name);
  // The groups the daemon is in, by name.
  absl::StatusOr<std::vector<DaemonGroupInfo>> ListGroups();
  // dist.all_reduce(tensor, op): in place on every member.
  absl::StatusOr<CollectiveResult> GroupAllReduce(absl::string_view group, const TensorRef& tensor,
                                                  ReduceOp op = ReduceOp::kSum,
                                                  const CollectiveOptions& options = {});
  // dist.broadcast(tensor, src=root): every member's tensor gets root's.
  absl::StatusOr<CollectiveResult> GroupBroadcast(absl::string_view group, const TensorRef& tensor,
                                                  int root, const CollectiveOptions& options = {});
  // dist.all_gather_into_tensor(output, input): `output` holds world_size
  // times `input`'s elements, every rank's input in rank order.
  absl::StatusOr<CollectiveResult> GroupAllGather(absl::string_view group, const TensorRef& input,
                                                  const TensorRef& output,
                                                  const CollectiveOptions& options = {});
  // dist.reduce_scatter_tensor(output, input, op): `output` gets this rank's
  // chunk of op over every rank's `input` (world_size times its elements).
  absl::StatusOr<CollectiveResult> GroupReduceScatter(absl::string_view group,
                                                      const TensorRef& input,
                                                      const TensorRef& output,
                                                      ReduceOp op = ReduceOp::kSum,
                                                      const CollectiveOptions& options = {});

  // --- Profiles (client_profile.cc; `gpumux bottleneck`, `gpumux profile`) --
  // A profile this session owns: sessions that open with its token (a
  // program run with GPUMUX_PROFILE naming a region file that holds it, see
  // client/profile_region.h) have their device work recorded into it, up to
  // `capacity` records (0: 65,536; INVALID_ARGUMENT above 16,777,216).
  struct StartedProfile {
    uint64_t id = 0;
    std::string token;
  };
  absl::StatusOr<StartedProfile> StartProfile(uint64_t capacity = 0);
  // Ends profile `id` and returns its device side (NOT_FOUND: not this
  // session's open profile).
  absl::StatusOr<DeviceProfile> FinishProfile(uint64_t id);
  // Profiles live session `session` of this session's tenant for `duration`
  // (PERMISSION_DENIED for another tenant's: Admin::ProfileSession profiles
  // any). NOT_FOUND for a session that is not open; INVALID_ARGUMENT for a
  // duration outside 1 ms .. 1 hour; FAILED_PRECONDITION when it is being
  // profiled already.
  absl::StatusOr<SessionProfile> ProfileSession(SessionId session, absl::Duration duration,
                                                uint64_t capacity = 0);

  // How many segments this client has mapped now.
  size_t MappedSegmentCountForTest() const;
  // The stats page this client's own allocator publishes to (local
  // allocation), mapped writable; null without one. For tests that play a
  // hostile client.
  void* StatsPageForTest() const;
  // How many segment mappings this client ever opened.
  uint64_t OpenedMappingCountForTest() const;
  // The size of the staging buffer mapped now; 0 before the first staged copy.
  uint64_t StagingBufferSizeForTest();

 private:
  friend class DeviceBuffer;
  friend class DeviceGuard;
  friend class Event;
  friend class LocalAllocator;
  friend class Stream;
  friend class StreamGuard;
  friend absl::Status nvtx::Mark(Client& client, absl::string_view message);
  friend absl::StatusOr<int> nvtx::RangePush(Client& client, absl::string_view message);
  friend absl::StatusOr<int> nvtx::RangePop(Client& client);

  // The gRPC channel, stubs, session stream, free batcher, segment mapper and
  // staging buffer (client/client_impl.h).
  class Impl;
  Client() = default;

  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux
