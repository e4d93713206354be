#pragma once

// Client's private implementation: the gRPC channel and stubs, the session
// stream, the free batcher, the segment mapper and the staging buffer. Only
// libgpumux's own files include this header; gpumux/client.h names none of
// it, so a program using the library sees no gRPC or protobuf header.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/free_batcher.h"
#include "client/host_profiler.h"
#include "client/local_allocator.h"
#include "client/segment_mapper.h"
#include "client/session_stream.h"
#include "client/staging_buffer.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/client.h"
#include "gpumux/comm_types.h"
#include "gpumux/copy_options.h"
#include "gpumux/current_streams.h"
#include "gpumux/device_buffer.h"
#include "gpumux/group_types.h"
#include "gpumux/memory_snapshot.h"
#include "gpumux/random_options.h"
#include "gpumux/v1/comm.grpc.pb.h"
#include "gpumux/v1/copy.grpc.pb.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/group.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/nvtx.grpc.pb.h"
#include "gpumux/v1/profile.grpc.pb.h"
#include "gpumux/v1/random.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace gpumux {

class Client::Impl {
 public:
  Impl(Client& self, std::string address, std::shared_ptr<grpc::Channel> channel,
       const Options& options);

  // Runs one unary session RPC: `call(context)` with the session metadata,
  // translated by FromGrpcStatus. UNAVAILABLE without a call once the session
  // stream has ended.
  absl::Status CallWithSession(absl::FunctionRef<grpc::Status(grpc::ClientContext*)> call);
  // UNAVAILABLE for calls after the session stream ended, with its reason.
  absl::Status SessionEndedError();
  // UNAVAILABLE "session N ended (the daemon restarted): reconnect ...".
  absl::Status RestartedError() const;
  // True when a daemon answers at address_ now (a quick unauthenticated call).
  bool DaemonAnswers() const;
  absl::Status SendFrees(const FreeBatch& frees);
  // After a request that carried `frees` (an Allocate or a Lease) failed:
  // whether the daemon applied them depends on where it failed. It frees
  // all-or-nothing, so sending them again settles it (NOT_FOUND: they were
  // applied); any other failure is logged as `what`.
  void SettleCarriedFrees(const FreeBatch& frees, absl::string_view what);
  // Before a memory RPC: sends queued frees so its result reflects them. Their
  // failure is logged and not the caller's (its own RPC reports a dead daemon).
  void FlushFreesBeforeCall();
  // The stat `key` of MemoryStats(device); INTERNAL when the daemon left it out.
  absl::StatusOr<int64_t> Stat(DeviceIndex device, absl::string_view key);
  // memory.h's calls that reach into a DeviceBuffer (Client, and so Impl,
  // is its friend), with their contracts there.
  bool TryFree(DeviceBuffer& buffer);
  absl::Status Free(DeviceBuffer&& buffer);
  absl::Status Free(DeviceBuffer&& buffer, absl::Span<const std::string> wait_event_handles);
  absl::Status RecordStream(const DeviceBuffer& buffer, const Stream& stream);
  absl::Status RecordStream(const DeviceBuffer& buffer, LocalStream stream);
  absl::StatusOr<std::string> Share(const DeviceBuffer& buffer);
  // Maps an allocation the daemon handed out and wraps it.
  absl::StatusOr<DeviceBuffer> Adopt(const v1::Allocation& allocation);
  void EnqueueFree(AllocationId id) { frees_.Enqueue(id); }
  // Queues the free of a buffer's allocation on `device`, fenced by the
  // calling thread's CUDA work when the buffer is mapped on CUDA device
  // `cuda_device` (-1: not mapped on CUDA; cuda_interop.h).
  void EnqueueFree(AllocationId id, DeviceIndex device, int cuda_device);
  // The free fence for memory mapped on `cuda_device` (cuda_free_fence.h),
  // or "" for -1.
  static std::string FreeFence(int cuda_device);
  void OnNotice(const v1::SessionServerMessage& notice);
  // The daemon's questions (on the notices' thread): return the wholly free
  // cached leases of a device (memory pressure from another session), and
  // list the blocks of every lease (a snapshot another process asked for).
  // Both answer even without a local allocator, so the daemon never waits.
  void ReleaseCachedForDaemon(const v1::ReleaseCached& request);
  void ListLeaseBlocks(uint64_t request);
  // `gpumux profile` on this session: record the host side (the process's
  // calls) from start to stop, and send it on the session stream.
  void StartProfilingForDaemon(const v1::StartProfiling& request);
  void StopProfilingForDaemon(uint64_t window);
  // Local allocation mode: starts the local allocator when `mode` (resolved
  // against GPUMUX_ALLOCATION) asks for it and this connection can map
  // leases. INVALID_ARGUMENT for a GPUMUX_ALLOCATION it does not know.
  // `streams`: ClientOptions::local_streams.
  absl::Status StartLocalAllocation(AllocationMode mode, std::shared_ptr<LocalStreams> streams);
  // Maps the session's stats page (Memory.GetStatsPage) for `local` to
  // publish its figures on.
  absl::Status AttachStatsPage(LocalAllocator& local, int device_count);
  // Frees a block of the local allocator (DeviceBuffer's destructor, Free).
  void FreeLocal(DeviceIndex device, uint64_t address, LocalStream stream);
  // The stream whose pool serves a local allocation (AllocateOptions::
  // local_stream) on gpumux stream `stream`.
  LocalStream PoolStream(const AllocateOptions& options, const Stream& stream) const;
  // The DeviceBuffer of a block of the local allocator.
  DeviceBuffer LocalBuffer(const LocalBlock& block, DeviceIndex device, uint64_t size);
  // The daemon's offset for `offset` into `buffer` (its offset in the lease
  // for a local block); for a local block also checks that `size` bytes
  // there fit it, as the daemon checks an allocation's range.
  absl::StatusOr<uint64_t> WireOffset(const DeviceBuffer& buffer, uint64_t offset, uint64_t size,
                                      absl::string_view role) const;
  // Work the daemon queued on `stream` touches `buffer`: a local block is
  // not reused before it completed, unless the caller waited for it.
  void NoteDaemonWork(const DeviceBuffer& buffer, const Stream& stream, bool waited);
  // Names `size` bytes at `offset` into `buffer` for the daemon (WireOffset).
  absl::Status SetRange(v1::DeviceRange* range, const DeviceBuffer& buffer, uint64_t offset,
                        uint64_t size, absl::string_view role) const;
  // Memory stats of the session on `device`: the daemon's, merged with the
  // local allocator's in local mode.
  absl::StatusOr<std::map<std::string, int64_t>> SessionStats(DeviceIndex device);
  // OK while the session lives, else SessionEndedError().
  absl::Status CheckSession();

  // options.stream, or the current stream of `device`; INVALID_ARGUMENT for a
  // stream of another Client or device. `what` names the work for messages.
  absl::StatusOr<Stream> ResolveStream(const std::optional<Stream>& stream, DeviceIndex device,
                                       absl::string_view what);
  // What the daemon would answer for `stream` of this Client (its default
  // stream or one it created and did not destroy), for calls on local blocks
  // that do not ask it: NOT_FOUND for an unknown stream, INVALID_ARGUMENT for
  // one named on another device than its own.
  absl::Status CheckKnownStream(const Stream& stream) const;
  // The completion event a reply named (an empty Event for id 0).
  Event AdoptCompletionEvent(DeviceIndex device, uint64_t id, std::string ipc_handle);
  // The staging buffer, obtained and mapped on first use.
  absl::StatusOr<StagingBuffer*> StagingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(staging_mu_);
  absl::StatusOr<Event> InlineHostToDevice(const DeviceBuffer& dst, uint64_t dst_offset,
                                           const char* src, uint64_t size, const Stream& stream,
                                           const CopyOptions& options);
  absl::StatusOr<Event> StagedHostToDevice(const DeviceBuffer& dst, uint64_t dst_offset,
                                           const char* src, uint64_t size, const Stream& stream,
                                           const CopyOptions& options);
  absl::StatusOr<Event> InlineDeviceToHost(char* dst, const DeviceBuffer& src, uint64_t src_offset,
                                           uint64_t size, const Stream& stream,
                                           const CopyOptions& options);
  absl::StatusOr<Event> StagedDeviceToHost(char* dst, const DeviceBuffer& src, uint64_t src_offset,
                                           uint64_t size, const Stream& stream,
                                           const CopyOptions& options);
  bool UseStaging(TransferPath path, uint64_t size) const;
  // True for a TCP address: no memory socket, nothing mapped, no staging
  // buffer, no local allocation.
  bool OverTcp() const { return memory_files_ == nullptr; }
  // The device count, asked once.
  absl::StatusOr<int> CachedDeviceCount();
  // Device 0's properties, which carry the daemon's build (arch list,
  // gencode flags); empty ones for a daemon without devices.
  absl::StatusOr<DeviceProperties> BuildProperties();
  // The PCI bus id of `device`, asked once.
  absl::StatusOr<std::string> PciBusId(DeviceIndex device);

  // --- Collectives (client_comm.cc) ---
  // One collective call: the tensors it names (to find results that are the
  // caller's own memory), the devices taking part and their streams.
  struct CommCall {
    std::vector<const TensorRef*> named;
    std::vector<DeviceIndex> devices;
    std::vector<Stream> streams;  // one per device, once resolved
  };
  // Writes `tensor` into `out` and notes it in `call`. INVALID_ARGUMENT for a
  // buffer of another Client, or no buffer for a tensor with elements.
  absl::Status SetTensor(v1::Tensor* out, const TensorRef& tensor, absl::string_view role,
                         CommCall& call) const;
  // SetTensor for each of `tensors`, into new entries of `out`.
  absl::Status SetTensors(google::protobuf::RepeatedPtrField<v1::Tensor>* out,
                          absl::Span<const TensorRef> tensors, absl::string_view role,
                          CommCall& call) const;
  // Notes a device taking part that no tensor names (a destination).
  static void AddCommDevice(CommCall& call, int64_t device);
  // AddCommDevice for each of `devices`, which go into `out` too.
  static void AddCommDevices(google::protobuf::RepeatedField<int64_t>* out,
                             absl::Span<const int64_t> devices, CommCall& call);
  // Resolves the streams of `call` (options.streams, else the calling
  // thread's current ones) into `proto`'s streams and the other options.
  absl::Status SetCommOptions(v1::CommOptions* proto, const CollectiveOptions& options,
                              CommCall& call);
  // Runs `rpc` and turns its response into the caller's result: new
  // allocations adopted, the caller's memory found again, local blocks told
  // of the daemon's work on them.
  absl::StatusOr<CollectiveResult> RunCollective(
      CommCall& call, bool waited,
      absl::FunctionRef<grpc::Status(grpc::ClientContext*, v1::CommResponse*)> rpc);
  // SetCommOptions into `request`, then RunCollective with the Comm
  // service's `method`: what every collective ends with.
  template <typename Request>
  absl::StatusOr<CollectiveResult> Collective(
      CommCall& call, Request& request, const CollectiveOptions& options,
      grpc::Status (v1::Comm::Stub::*method)(grpc::ClientContext*, const Request&,
                                             v1::CommResponse*)) {
    absl::Status set = SetCommOptions(request.mutable_options(), options, call);
    if (!set.ok()) return set;
    return RunCollective(call, options.wait,
                         [&](grpc::ClientContext* context, v1::CommResponse* response) {
                           return (comm_stub_.get()->*method)(context, request, response);
                         });
  }

  // The Client this is the implementation of.
  Client& self_;
  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  // How channel_ was secured, for the fresh channels of DaemonAnswers.
  const ChannelSecurity security_;
  const std::unique_ptr<v1::Session::Stub> session_stub_;
  const std::unique_ptr<v1::Device::Stub> device_stub_;
  const std::unique_ptr<v1::Memory::Stub> memory_stub_;
  const std::unique_ptr<v1::Stream::Stub> stream_stub_;
  const std::unique_ptr<v1::Event::Stub> event_stub_;
  const std::unique_ptr<v1::Copy::Stub> copy_stub_;
  const std::unique_ptr<v1::Comm::Stub> comm_stub_;
  const std::unique_ptr<v1::Group::Stub> group_stub_;
  const std::unique_ptr<v1::Random::Stub> random_stub_;
  const std::unique_ptr<v1::Nvtx::Stub> nvtx_stub_;
  const std::unique_ptr<v1::Profile::Stub> profile_stub_;
  const uint64_t staging_buffer_size_;
  const uint64_t max_inline_copy_;
  CurrentStreams current_;
  mutable absl::Mutex device_count_mu_;
  std::optional<int> device_count_ ABSL_GUARDED_BY(device_count_mu_);
  mutable absl::Mutex streams_mu_;
  // The streams CreateStream made and DestroyStream has not destroyed.
  absl::flat_hash_map<StreamId, DeviceIndex> created_streams_ ABSL_GUARDED_BY(streams_mu_);
  absl::Mutex pci_bus_ids_mu_;
  absl::flat_hash_map<DeviceIndex, std::string> pci_bus_ids_ ABSL_GUARDED_BY(pci_bus_ids_mu_);
  // Held for a whole staged copy: staged copies take turns on the buffer.
  absl::Mutex staging_mu_;
  std::unique_ptr<StagingBuffer> staging_ ABSL_GUARDED_BY(staging_mu_);
  // Fetches segments, the staging buffer and events from the memory socket;
  // null for a TCP address. Set once at Connect, before any use.
  std::unique_ptr<MemoryFileFetcher> memory_files_;
  // Declared before session_ so that it outlives the notices' reader thread.
  SegmentMapper mapper_;
  std::unique_ptr<SessionStream> session_;
  SessionId session_id_;
  // "<session_id>:<secret>", the gpumux-session metadata value.
  std::string credentials_;
  // Last members: the batcher's thread sends through everything above, and
  // the local allocator returns its leases through the batcher.
  FreeBatcher frees_;
  // Ids of local blocks (DeviceBuffer::id), below their top bit.
  std::atomic<uint64_t> next_local_id_{1};
  // Held while the notices' thread answers the daemon's questions with
  // local_, and while local_ is set or reset (the thread runs from before
  // Connect sets it until after ~Client resets it).
  absl::Mutex answers_mu_;
  // The streams of this process's own work (ClientOptions::local_streams,
  // or made at Connect); whether they are CUDA's. Set before local_.
  std::shared_ptr<LocalStreams> local_streams_;
  bool cuda_local_streams_ = false;
  // Set at Connect in local allocation mode; null in daemon mode. Read
  // without answers_mu_ on every other path: those run between.
  std::unique_ptr<LocalAllocator> local_;
  // The daemon's profile windows open on this session (by window id).
  absl::flat_hash_map<uint64_t, ProfileRegion::Mark> profile_windows_ ABSL_GUARDED_BY(answers_mu_);
};

// The session behind `client`, for the modules' free functions.
inline Client::Impl& ImplOf(Client& client) { return *client.impl_; }
inline const Client::Impl& ImplOf(const Client& client) { return *client.impl_; }

}  // namespace gpumux
