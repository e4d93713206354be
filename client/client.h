#pragma once

// libgpumux: a process's connection to gpumuxd, in the shape of torch.cuda
// (each method names its torch.cuda counterpart). A Client owns one session:
// it opens it on Connect, keeps its stream open (the daemon's liveness signal
// and notice channel) and ends it on destruction, when the daemon releases
// everything the session still holds.
//
// Every fallible call returns the daemon's status code and message; when the
// daemon cannot be reached or went away, UNAVAILABLE "cannot reach gpumuxd at
// <address>: <detail>". Thread-safe: any thread may call any method.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client_options.h"
#include "client/device_buffer.h"
#include "client/device_properties.h"
#include "client/free_batcher.h"
#include "client/memory_snapshot.h"
#include "client/segment_mapper.h"
#include "client/session_stream.h"
#include "common/default_address.h"
#include "common/ids.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

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

  // Sends queued frees, ends the session (the daemon releases what it still
  // holds) and unmaps every segment. All DeviceBuffers of this client must be
  // gone by then.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The address as given to Connect.
  const std::string& address() const { return address_; }
  SessionId session_id() const { return session_id_; }
  const std::string& tenant() const { return session_->opened().tenant(); }
  // "host" or "cuda".
  const std::string& backend() const { return session_->opened().backend(); }
  const std::string& daemon_version() const { return session_->opened().daemon_version(); }

  // Session.Ping: one round trip that checks the session's credentials.
  absl::Status Ping();

  // --- Devices -----------------------------------------------------------
  // torch.cuda.device_count()
  absl::StatusOr<int> DeviceCount();
  // torch.cuda.get_device_name(device); INVALID_ARGUMENT for a device out of range.
  absl::StatusOr<std::string> GetDeviceName(DeviceIndex device);
  // torch.cuda.get_device_properties(device); INVALID_ARGUMENT as above.
  absl::StatusOr<DeviceProperties> GetDeviceProperties(DeviceIndex device);
  // torch.cuda.synchronize(device): waits for all work queued on the device.
  absl::Status Synchronize(DeviceIndex device);

  // --- Allocation --------------------------------------------------------
  // torch.empty(size, dtype=uint8, device=...) without the tensor: allocates
  // `size` bytes and maps their segment. Carries the queued frees, which the
  // daemon applies first. Errors: INVALID_ARGUMENT for size 0, a size above
  // the device's memory or a bad device; NOT_FOUND for an unknown stream;
  // RESOURCE_EXHAUSTED with PyTorch's out-of-memory text; a mapping failure's
  // code (the allocation is then freed again).
  absl::StatusOr<DeviceBuffer> Allocate(uint64_t size, DeviceIndex device = DeviceIndex(0),
                                        const AllocateOptions& options = AllocateOptions());
  // `del x`: frees `buffer` asynchronously (batched, as its destructor does).
  void Release(DeviceBuffer&& buffer);
  // Frees `buffer` now and returns the daemon's answer. INVALID_ARGUMENT for an
  // empty buffer or one of another Client (which is then released to its own
  // client); the buffer is consumed either way.
  absl::Status Free(DeviceBuffer&& buffer);
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

  // --- Statistics (this session's view) ----------------------------------
  // torch.cuda.memory_allocated(device): allocated_bytes.all.current.
  absl::StatusOr<int64_t> MemoryAllocated(DeviceIndex device = DeviceIndex(0));
  // torch.cuda.max_memory_allocated(device): allocated_bytes.all.peak.
  absl::StatusOr<int64_t> MaxMemoryAllocated(DeviceIndex device = DeviceIndex(0));
  // torch.cuda.memory_reserved(device): reserved_bytes.all.current.
  absl::StatusOr<int64_t> MemoryReserved(DeviceIndex device = DeviceIndex(0));
  // torch.cuda.max_memory_reserved(device): reserved_bytes.all.peak.
  absl::StatusOr<int64_t> MaxMemoryReserved(DeviceIndex device = DeviceIndex(0));
  // torch.cuda.memory_stats(device): PyTorch's 122 keys.
  absl::StatusOr<std::map<std::string, int64_t>> MemoryStats(DeviceIndex device = DeviceIndex(0));
  // torch.cuda.memory_summary(device, abbreviated): PyTorch's table.
  absl::StatusOr<std::string> MemorySummary(DeviceIndex device = DeviceIndex(0),
                                            bool abbreviated = false);
  // torch.cuda.memory_snapshot(): this session's segments, sorted by
  // (device, address); of one device when given.
  absl::StatusOr<std::vector<SegmentInfo>> MemorySnapshot(
      std::optional<DeviceIndex> device = std::nullopt);
  // torch.cuda.reset_peak_memory_stats(device)
  absl::Status ResetPeakMemoryStats(DeviceIndex device = DeviceIndex(0));
  // torch.cuda.reset_accumulated_memory_stats(device)
  absl::Status ResetAccumulatedMemoryStats(DeviceIndex device = DeviceIndex(0));

  // --- Cache and limits --------------------------------------------------
  // torch.cuda.empty_cache(): releases this session's cached, unused segments
  // (every session's with options.all_sessions) and says how much.
  absl::StatusOr<ReleasedCache> EmptyCache(const EmptyCacheOptions& options = EmptyCacheOptions());
  // torch.cuda.set_per_process_memory_fraction(fraction, device): caps the
  // bytes reserved for this session on `device` at fraction × total memory.
  // INVALID_ARGUMENT "Invalid fraction value: <f>. Allowed range: 0~1" (checked
  // here, as PyTorch does) for a fraction outside [0, 1].
  absl::Status SetPerProcessMemoryFraction(double fraction, DeviceIndex device = DeviceIndex(0));
  // The same cap in bytes; 0 removes it.
  absl::Status SetMemoryLimit(uint64_t bytes, DeviceIndex device = DeviceIndex(0));

  // How many segments this client has mapped now.
  size_t MappedSegmentCountForTest() const { return mapper_.size(); }

 private:
  friend class DeviceBuffer;

  Client(std::string address, std::shared_ptr<grpc::Channel> channel,
         absl::Duration free_batch_delay);

  // Runs one unary session RPC: `call(context)` with the session metadata,
  // translated by FromGrpcStatus. UNAVAILABLE without a call once the session
  // stream has ended.
  absl::Status CallWithSession(absl::FunctionRef<grpc::Status(grpc::ClientContext*)> call);
  // UNAVAILABLE for calls after the session stream ended, with its reason.
  absl::Status SessionEndedError();
  absl::Status SendFrees(const std::vector<AllocationId>& ids);
  // Before a memory RPC: sends queued frees so its result reflects them. Their
  // failure is logged and not the caller's (its own RPC reports a dead daemon).
  void FlushFreesBeforeCall();
  // The stat `key` of MemoryStats(device); INTERNAL when the daemon left it out.
  absl::StatusOr<int64_t> Stat(DeviceIndex device, absl::string_view key);
  // Maps an allocation the daemon handed out and wraps it.
  absl::StatusOr<DeviceBuffer> Adopt(const v1::Allocation& allocation);
  void EnqueueFree(AllocationId id) { frees_.Enqueue(id); }
  void OnNotice(const v1::SessionServerMessage& notice);

  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Session::Stub> session_stub_;
  const std::unique_ptr<v1::Device::Stub> device_stub_;
  const std::unique_ptr<v1::Memory::Stub> memory_stub_;
  // Declared before session_ so that it outlives the notices' reader thread.
  SegmentMapper mapper_;
  std::unique_ptr<SessionStream> session_;
  SessionId session_id_;
  // "<session_id>:<secret>", the gpumux-session metadata value.
  std::string credentials_;
  // Last member: its thread sends through everything above.
  FreeBatcher frees_;
};

}  // namespace gpumux
