#include "client/client.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/channel.h"
#include "client/cuda_free_fence.h"
#include "client/grpc_status.h"
#include "client/proto_conversion.h"
#include "common/default_address.h"
#include "common/memory_socket.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr char kSessionMetadataKey[] = "gpumux-session";

// /proc/self/comm without its newline: what `ps` shows as the process name.
std::string ProcessName() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? std::string("gpumux-client") : name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(absl::string_view address,
                                                        const Options& options) {
  const absl::Time deadline = absl::Now() + options.open_timeout;
  std::unique_ptr<Client> client(
      new Client(std::string(address), CreateDaemonChannel(address), options));
  GPUMUX_RETURN_IF_ERROR(AwaitConnectAttempt(*client->channel_, options.open_timeout, address));

  v1::OpenSessionRequest request;
  request.set_client_name(options.client_name.empty() ? ProcessName() : options.client_name);
  request.set_pid(getpid());
  request.set_tenant(options.tenant);
  request.mutable_labels()->insert(options.labels.begin(), options.labels.end());
  Client* raw = client.get();
  GPUMUX_ASSIGN_OR_RETURN(
      client->session_,
      SessionStream::Open(
          *client->session_stub_, request, deadline, client->address_,
          [raw](const v1::SessionServerMessage& notice) { raw->OnNotice(notice); }));
  const v1::SessionOpened& opened = client->session_->opened();
  client->session_id_ = SessionId(opened.session_id());
  client->credentials_ = absl::StrCat(opened.session_id(), ":", opened.secret());
  // Shared memory comes from the memory socket next to the daemon's Unix
  // socket; a TCP address has none.
  if (absl::StatusOr<std::string> path = UnixSocketPathOf(ToGrpcTarget(client->address_)); path.ok()) {
    client->memory_files_ = std::make_unique<MemoryFileFetcher>(MemorySocketPath(*path), client->credentials_);
  }
  return client;
}

Client::Client(std::string address, std::shared_ptr<grpc::Channel> channel, const Options& options)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      session_stub_(v1::Session::NewStub(channel_)),
      device_stub_(v1::Device::NewStub(channel_)),
      memory_stub_(v1::Memory::NewStub(channel_)),
      stream_stub_(v1::Stream::NewStub(channel_)),
      event_stub_(v1::Event::NewStub(channel_)),
      copy_stub_(v1::Copy::NewStub(channel_)),
      random_stub_(v1::Random::NewStub(channel_)),
      nvtx_stub_(v1::Nvtx::NewStub(channel_)),
      staging_buffer_size_(options.staging_buffer_size),
      max_inline_copy_(options.max_inline_copy),
      frees_([this](const FreeBatch& frees) { return SendFrees(frees); },
             options.free_batch_delay) {}

Client::~Client() {
  {
    // Its completion events are destroyed while the session still lives.
    absl::MutexLock lock(&staging_mu_);
    staging_.reset();
  }
  if (session_ != nullptr) {
    absl::Status flushed = frees_.Stop();
    // With the session gone (or the daemon: UNAVAILABLE) the daemon has
    // released everything anyway.
    if (!flushed.ok() && !session_->ended() && !absl::IsUnavailable(flushed)) {
      spdlog::warn("gpumux: freeing queued allocations at exit failed: {}", flushed.ToString());
    }
    // The daemon drops the fences of a closed session without waiting: the
    // kernels they stand for must have finished before the memory goes.
    WaitForFreeFences();
    session_->Close().IgnoreError();
  }
  mapper_.UnmapAll();
}

absl::Status Client::CallWithSession(absl::FunctionRef<grpc::Status(grpc::ClientContext*)> call) {
  if (session_ == nullptr) return absl::FailedPreconditionError("the client has no session");
  if (session_->ended()) return SessionEndedError();
  grpc::ClientContext context;
  context.AddMetadata(kSessionMetadataKey, credentials_);
  const grpc::Status status = call(&context);
  // Our own credentials refused while our stream still looks open: the
  // daemon answering is not the one that opened the session.
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) return RestartedError();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && session_->ended()) return SessionEndedError();
  return FromGrpcStatus(status, address_);
}

absl::Status Client::RestartedError() const {
  return absl::UnavailableError(absl::StrCat("session ", session_->opened().session_id(),
                                             " ended (the daemon restarted): reconnect with a new gpumux::Client"));
}

bool Client::DaemonAnswers() const {
  // A fresh channel: the session's may still be backing off from the old
  // daemon's end.
  std::shared_ptr<grpc::Channel> probe = CreateDaemonChannel(address_);
  std::unique_ptr<v1::Device::Stub> device = v1::Device::NewStub(probe);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  v1::GetDeviceCountRequest request;
  v1::GetDeviceCountResponse response;
  return device->GetDeviceCount(&context, request, &response).ok();
}

absl::Status Client::CheckSession() {
  if (session_ == nullptr) return absl::FailedPreconditionError("the client has no session");
  return session_->ended() ? SessionEndedError() : absl::OkStatus();
}

absl::Status Client::SessionEndedError() {
  // The stream's final status says why. UNAVAILABLE: the daemon went away
  // (it shut down, or died and the stream broke); if one answers again now,
  // it is a new daemon that knows nothing of this session.
  absl::Status final_status = session_->Close();
  if (absl::IsUnavailable(final_status)) {
    if (DaemonAnswers()) return RestartedError();
    return UnreachableError(address_, absl::StrCat("session ", session_->opened().session_id(),
                                                   " ended when it stopped (", final_status.message(),
                                                   "); reconnect with a new gpumux::Client once it runs again"));
  }
  return UnreachableError(
      address_, final_status.ok() ? std::string("gpumuxd ended the session")
                                  : absl::StrCat("the session ended: ", final_status.ToString()));
}

absl::Status Client::Ping() {
  v1::PingRequest request;
  v1::PingResponse response;
  return CallWithSession([&](grpc::ClientContext* context) {
    return session_stub_->Ping(context, request, &response);
  });
}

// --- Devices ---------------------------------------------------------------

absl::StatusOr<int> Client::DeviceCount() {
  v1::GetDeviceCountRequest request;
  v1::GetDeviceCountResponse response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return device_stub_->GetDeviceCount(context, request, &response);
  }));
  return response.count();
}

absl::StatusOr<std::string> Client::GetDeviceName(DeviceIndex device) {
  GPUMUX_ASSIGN_OR_RETURN(DeviceProperties properties, GetDeviceProperties(device));
  return std::move(properties.name);
}

absl::StatusOr<DeviceProperties> Client::GetDeviceProperties(DeviceIndex device) {
  v1::GetDevicePropertiesRequest request;
  request.set_device(device.value());
  v1::DeviceProperties response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return device_stub_->GetDeviceProperties(context, request, &response);
  }));
  return FromProto(response);
}

absl::Status Client::Synchronize(DeviceIndex device) {
  FlushFreesBeforeCall();
  v1::SynchronizeRequest request;
  request.set_device(device.value());
  v1::SynchronizeResponse response;
  return CallWithSession([&](grpc::ClientContext* context) {
    return device_stub_->Synchronize(context, request, &response);
  });
}

// --- Allocation ------------------------------------------------------------

absl::StatusOr<DeviceBuffer> Client::Allocate(uint64_t size, DeviceIndex device,
                                              const AllocateOptions& options) {
  GPUMUX_ASSIGN_OR_RETURN(const Stream stream,
                          ResolveStream(options.stream, device, "the allocation"));
  v1::AllocateRequest request;
  request.set_device(device.value());
  request.set_size(size);
  request.set_stream(stream.id().value());
  request.set_shareable(options.shareable);
  const FreeBatch frees = frees_.Take();
  for (AllocationId id : frees.ids) request.add_free_allocation_ids(id.value());
  for (const std::string& handle : frees.wait_event_handles) request.add_free_wait_event_handles(handle);
  v1::AllocateResponse response;
  absl::Status status = CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->Allocate(context, request, &response);
  });
  if (!status.ok()) {
    if (!frees.ids.empty()) {
      // Whether the daemon applied the carried frees depends on where the
      // request failed. It frees all-or-nothing, so sending them again settles
      // it: NOT_FOUND means they were applied already.
      absl::Status resent = SendFrees(frees);
      if (!resent.ok() && !absl::IsNotFound(resent) && !absl::IsUnavailable(resent)) {
        spdlog::warn("gpumux: freeing queued allocations failed: {}", resent.ToString());
      }
    }
    return status;
  }
  return Adopt(response.allocation());
}

absl::StatusOr<DeviceBuffer> Client::Adopt(const v1::Allocation& allocation) {
  DeviceBuffer::Info info;
  info.id = AllocationId(allocation.allocation_id());
  info.device = DeviceIndex(allocation.device());
  info.size = allocation.requested_size();
  info.allocated_size = allocation.size();
  info.address = allocation.address();
  info.segment_id = SegmentId(allocation.segment_id());
  info.offset = allocation.offset();
  if (allocation.offset() > allocation.segment_size() ||
      allocation.size() > allocation.segment_size() - allocation.offset()) {
    EnqueueFree(info.id);
    return absl::InternalError(
        absl::StrCat("gpumuxd placed allocation ", allocation.allocation_id(), " (",
                     allocation.size(), " bytes at offset ", allocation.offset(),
                     ") outside its segment of ", allocation.segment_size(), " bytes"));
  }
  void* data = nullptr;
  absl::StatusOr<void*> base = mapper_.Map(info.device, info.segment_id, allocation.segment_handle(),
                                           allocation.segment_size(), memory_files_.get(), &info.cuda_device);
  if (base.ok()) {
    data = static_cast<char*>(*base) + allocation.offset();
  } else if (!absl::IsUnimplemented(base.status())) {
    // Unimplemented: a handle this build cannot map (CUDA IPC); the allocation
    // is still usable through the daemon. Anything else is a failure.
    EnqueueFree(info.id);
    return base.status();
  }
  return DeviceBuffer(this, info, data);
}

void Client::Release(DeviceBuffer&& buffer) { DeviceBuffer doomed(std::move(buffer)); }

absl::Status Client::Free(DeviceBuffer&& buffer) {
  if (!buffer.valid()) return absl::InvalidArgumentError("cannot free an empty DeviceBuffer");
  if (buffer.client_ != this) {
    const AllocationId foreign = buffer.id();
    DeviceBuffer doomed(std::move(buffer));  // consumed: its own client frees it
    return absl::InvalidArgumentError(
        absl::StrCat("allocation ", ToString(foreign), " belongs to another Client"));
  }
  const int cuda_device = buffer.cuda_device_;
  FreeBatch free;
  free.ids.push_back(buffer.Detach());
  if (std::string fence = FreeFence(cuda_device); !fence.empty()) free.wait_event_handles.push_back(fence);
  FlushFreesBeforeCall();
  return SendFrees(free);
}

absl::Status Client::Free(DeviceBuffer&& buffer, absl::Span<const std::string> wait_event_handles) {
  if (!buffer.valid()) return absl::InvalidArgumentError("cannot free an empty DeviceBuffer");
  if (buffer.client_ != this) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocation ", ToString(buffer.id()), " belongs to another Client"));
  }
  v1::FreeRequest request;
  request.add_allocation_ids(buffer.id().value());
  for (const std::string& handle : wait_event_handles) {
    if (handle.size() != kEventIpcHandleBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("cudaIpcEventHandle_t expects byte-like object of size ",
                       kEventIpcHandleBytes, ", but got ", handle.size()));
    }
    request.add_wait_event_handles(handle);
  }
  if (std::string fence = FreeFence(buffer.cuda_device_); !fence.empty()) {
    request.add_wait_event_handles(fence);
  }
  FlushFreesBeforeCall();
  v1::FreeResponse response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->Free(context, request, &response);
  }));
  buffer.Detach();
  return absl::OkStatus();
}

absl::Status Client::RecordStream(const DeviceBuffer& buffer, const Stream& stream) {
  if (!buffer.valid()) {
    return absl::InvalidArgumentError("cannot record a stream on an empty DeviceBuffer");
  }
  // Checked here: stream 0 on the wire is the default stream of the
  // allocation's device, whichever device the caller meant.
  GPUMUX_RETURN_IF_ERROR(
      ResolveStream(stream, buffer.device(), absl::StrCat("allocation ", ToString(buffer.id())))
          .status());
  FlushFreesBeforeCall();
  v1::RecordStreamRequest request;
  request.set_allocation_id(buffer.id().value());
  request.set_stream(stream.id().value());
  v1::RecordStreamResponse response;
  return CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->RecordStream(context, request, &response);
  });
}

absl::Status Client::FlushFrees() { return frees_.Flush(); }

void Client::EnqueueFree(AllocationId id, DeviceIndex device, int cuda_device) {
  const std::string fence = FreeFence(cuda_device);
  if (frees_.Enqueue(id, fence, device)) return;
  // The batch is full, or fences of another device are queued: they leave
  // first (rare: fenced frees on two GPUs within one batch's millisecond,
  // from racing threads).
  do {
    FlushFreesBeforeCall();
  } while (!frees_.Enqueue(id, fence, device));
}

std::string Client::FreeFence(int cuda_device) {
  return cuda_device < 0 ? std::string() : RecordFreeFence(cuda_device);
}

absl::Status Client::SendFrees(const FreeBatch& frees) {
  v1::FreeRequest request;
  for (AllocationId id : frees.ids) request.add_allocation_ids(id.value());
  for (const std::string& handle : frees.wait_event_handles) request.add_wait_event_handles(handle);
  v1::FreeResponse response;
  return CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->Free(context, request, &response);
  });
}

void Client::FlushFreesBeforeCall() {
  if (absl::Status status = frees_.Flush(); !status.ok() && !absl::IsUnavailable(status)) {
    spdlog::warn("gpumux: freeing queued allocations failed: {}", status.ToString());
  }
}

void Client::OnNotice(const v1::SessionServerMessage& notice) {
  if (notice.has_segment_released()) {
    const v1::SegmentReleased& released = notice.segment_released();
    mapper_.Unmap(DeviceIndex(released.device()), SegmentId(released.segment_id()));
  }
  // Notices this version does not know are ignored, so newer daemons work.
}

// --- Sharing ---------------------------------------------------------------

absl::StatusOr<std::string> Client::Share(const DeviceBuffer& buffer) {
  if (!buffer.valid()) return absl::InvalidArgumentError("cannot share an empty DeviceBuffer");
  FlushFreesBeforeCall();
  v1::ShareRequest request;
  request.set_allocation_id(buffer.id().value());
  v1::ShareResponse response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->Share(context, request, &response);
  }));
  return std::move(*response.mutable_token());
}

absl::StatusOr<DeviceBuffer> Client::Import(absl::string_view token) {
  FlushFreesBeforeCall();
  v1::ImportRequest request;
  request.set_token(std::string(token));
  v1::ImportResponse response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->Import(context, request, &response);
  }));
  return Adopt(response.allocation());
}

}  // namespace gpumux
