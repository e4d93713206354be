#pragma once

// libgpumux: a process's connection to gpumuxd, in the shape of torch.cuda.
// Client holds what torch.cuda keeps at its top (each method names its
// counterpart): the session, devices, the current device and stream,
// streams, events and synchronize. The modules are free functions over a
// Client, each in its header as torch.cuda has them: gpumux/memory.h,
// random.h, comm.h, nccl.h and nvtx.h; copy.h (copies and memset),
// distributed.h (groups of daemons) and profiler.h. A Client owns one session:
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
#include "gpumux/client_options.h"
#include "gpumux/common/default_address.h"
#include "gpumux/common/host_ipc_event.h"
#include "gpumux/common/ids.h"
#include "gpumux/device_properties.h"
#include "gpumux/event.h"
#include "gpumux/stream.h"

namespace gpumux {

class Client {
 public:
  using Options = ClientOptions;
  // The gRPC channel, stubs, session stream, free batcher, segment mapper and
  // staging buffer: libgpumux's own (client/client_impl.h), which the
  // modules' free functions reach through ImplOf.
  class Impl;

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
  // another Client. See also StreamGuard and DeviceGuard (gpumux/guards.h).
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

  // --- Events (client_streams.cc; see gpumux/event.h) ----------------------
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

 private:
  friend class DeviceBuffer;
  friend class DeviceGuard;
  friend class Event;
  friend class LocalAllocator;
  friend class Stream;
  friend class StreamGuard;

  // The free functions of the modules (gpumux/memory.h, copy.h, random.h,
  // comm.h, nccl.h, distributed.h, profiler.h, nvtx.h) reach the session
  // through this; client/client_impl.h defines it.
  friend Impl& ImplOf(Client& client);
  friend const Impl& ImplOf(const Client& client);
  Client() = default;

  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux
