#include "gpumux/client.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "allocator/allocator_config.h"
#include "client/channel.h"
#include "client/client_impl.h"
#include "client/client_testing.h"
#include "client/cuda_blas.h"
#include "client/cuda_free_fence.h"
#include "client/cuda_local_streams.h"
#include "client/cuda_own_work.h"
#include "client/grpc_status.h"
#include "client/host_profiler.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/common/default_address.h"
#include "gpumux/host_local_streams.h"
#include "gpumux/memory.h"
#include "proto/profile_records.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

constexpr char kSessionMetadataKey[] = "gpumux-session";
constexpr char kCallMetadataKey[] = "gpumux-call";

// Device.GetDeviceCount at `address` on a fresh channel, within `timeout`;
// needs no session.
absl::StatusOr<int> AskDeviceCount(absl::string_view address, const ChannelSecurity& security,
                                   absl::Duration timeout) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                          CreateDaemonChannel(address, security));
  std::unique_ptr<v1::Device::Stub> device = v1::Device::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::GetDeviceCountRequest request;
  v1::GetDeviceCountResponse response;
  GPUMUX_RETURN_IF_ERROR(
      FromGrpcStatus(device->GetDeviceCount(&context, request, &response), address));
  return response.count();
}

// /proc/self/comm without its newline: what `ps` shows as the process name.
std::string ProcessName() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? std::string("gpumux-client") : name;
}

// $NAME where set and non-empty, else "".
std::string NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// options.labels joined with $GPUMUX_LABELS ("k=v,k=v"); options win.
absl::StatusOr<std::map<std::string, std::string>> SessionLabels(
    const std::map<std::string, std::string>& given) {
  std::map<std::string, std::string> labels = given;
  const std::string env = NonEmptyEnv("GPUMUX_LABELS");
  for (absl::string_view pair : absl::StrSplit(env, ',', absl::SkipWhitespace())) {
    pair = absl::StripAsciiWhitespace(pair);
    const size_t equals = pair.find('=');
    if (equals == absl::string_view::npos || equals == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPUMUX_LABELS=", env, ": '", pair,
                       "' is not KEY=VALUE (comma-separated pairs, e.g. pod=web-0,namespace=ml)"));
    }
    labels.emplace(std::string(pair.substr(0, equals)), std::string(pair.substr(equals + 1)));
  }
  return labels;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(absl::string_view address,
                                                        const Options& options) {
  GPUMUX_PROFILED("Client::Connect");
  const absl::Time deadline = absl::Now() + options.open_timeout;
  GPUMUX_ASSIGN_OR_RETURN(const auto labels, SessionLabels(options.labels));
  // Before the Client, whose destructor needs its Impl.
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                          CreateDaemonChannel(address, options.security));
  std::unique_ptr<Client> client(new Client());
  client->impl_ =
      std::make_unique<Impl>(*client, std::string(address), std::move(channel), options);
  Impl& impl = *client->impl_;
  GPUMUX_RETURN_IF_ERROR(AwaitConnectAttempt(*impl.channel_, options.open_timeout, address));

  v1::OpenSessionRequest request;
  std::string client_name = options.client_name;
  if (client_name.empty()) client_name = NonEmptyEnv("GPUMUX_CLIENT_NAME");
  request.set_client_name(client_name.empty() ? ProcessName() : client_name);
  request.set_pid(getpid());
  request.set_tenant(options.tenant.empty() ? NonEmptyEnv("GPUMUX_TENANT") : options.tenant);
  request.mutable_labels()->insert(labels.begin(), labels.end());
  request.set_profile_token(HostProfiler::Token());  // under `gpumux bottleneck`
  request.set_records_host_calls(true);              // for `gpumux profile`
  GPUMUX_ASSIGN_OR_RETURN(impl.session_,
                          SessionStream::Open(*impl.session_stub_, request, deadline, impl.address_,
                                              [&impl](const v1::SessionServerMessage& notice) {
                                                impl.OnNotice(notice);
                                              }));
  const v1::SessionOpened& opened = impl.session_->opened();
  impl.session_id_ = SessionId(opened.session_id());
  impl.credentials_ = absl::StrCat(opened.session_id(), ":", opened.secret());
  // Shared memory comes from the memory socket next to the daemon's Unix
  // socket; a TCP address has none.
  if (absl::StatusOr<std::string> path = UnixSocketPathOf(ToGrpcTarget(impl.address_)); path.ok()) {
    impl.memory_files_ =
        std::make_unique<MemoryFileFetcher>(MemorySocketPath(*path), impl.credentials_);
  }
  GPUMUX_RETURN_IF_ERROR(impl.StartLocalAllocation(options.allocation, options.local_streams));
  return client;
}

absl::Status Client::Impl::StartLocalAllocation(AllocationMode mode,
                                                std::shared_ptr<LocalStreams> streams) {
  if (mode == AllocationMode::kDefault) {
    const char* env = std::getenv("GPUMUX_ALLOCATION");
    const absl::string_view value = env == nullptr ? "" : env;
    if (value.empty() || value == "local") {
      mode = AllocationMode::kLocal;
    } else if (value == "daemon") {
      mode = AllocationMode::kDaemon;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPUMUX_ALLOCATION=", value, " is neither \"daemon\" nor \"local\" (unset: local)"));
    }
  }
  if (mode != AllocationMode::kLocal) return absl::OkStatus();
  // Leases are mapped into this process (memory files from the memory socket
  // on the host backend, CUDA IPC handles on CUDA), which needs the daemon's
  // machine: over TCP the client allocates through the daemon.
  if (OverTcp()) return absl::OkStatus();
  GPUMUX_ASSIGN_OR_RETURN(AllocatorOptions options,
                          AllocatorOptions::Parse(session_->opened().allocator_conf()));
  // Leases are whole segments: with expandable segments the daemon's
  // allocator maps the pages, and the client allocates through it.
  if (options.expandable_segments) return absl::OkStatus();
  GPUMUX_ASSIGN_OR_RETURN(const int device_count, CachedDeviceCount());
  std::vector<uint64_t> total_memory;
  for (int d = 0; d < device_count; ++d) {
    GPUMUX_ASSIGN_OR_RETURN(DeviceProperties properties, self_.GetDeviceProperties(DeviceIndex(d)));
    total_memory.push_back(properties.total_memory);
  }
  if (streams == nullptr && self_.backend() == "cuda") {
    // Null in a build without CUDA, which maps no CUDA memory either: its
    // blocks are only used through the daemon.
    streams = MakeCudaLocalStreams([this](DeviceIndex device) { return PciBusId(device); });
    cuda_local_streams_ = streams != nullptr;
  }
  if (streams == nullptr) streams = std::make_shared<HostLocalStreams>();
  local_streams_ = std::move(streams);
  auto local = std::make_unique<LocalAllocator>(*this, local_streams_.get(), device_count,
                                                std::move(total_memory), options);
  GPUMUX_RETURN_IF_ERROR(AttachStatsPage(*local, device_count));
  absl::MutexLock lock(&answers_mu_);
  local_ = std::move(local);
  return absl::OkStatus();
}

absl::Status Client::Impl::AttachStatsPage(LocalAllocator& local, int device_count) {
  // The page where the allocator publishes its figures for every observer.
  v1::StatsPageResponse page;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->GetStatsPage(context, v1::GetStatsPageRequest(), &page);
  }));
  GPUMUX_ASSIGN_OR_RETURN(SealedMemory memory, memory_files_->Fetch(page.key(), page.size()));
  GPUMUX_ASSIGN_OR_RETURN(MemoryMapping mapping, memory.Map(/*writable=*/true));
  GPUMUX_ASSIGN_OR_RETURN(StatsPageWriter writer,
                          StatsPageWriter::Attach(mapping.data(), page.size(), device_count));
  local.AttachStatsPage(std::move(memory), std::move(mapping), writer);
  return absl::OkStatus();
}

Client::Impl::Impl(Client& self, std::string address, std::shared_ptr<grpc::Channel> channel,
                   const Options& options)
    : self_(self),
      address_(std::move(address)),
      channel_(std::move(channel)),
      security_(options.security),
      session_stub_(v1::Session::NewStub(channel_)),
      device_stub_(v1::Device::NewStub(channel_)),
      memory_stub_(v1::Memory::NewStub(channel_)),
      stream_stub_(v1::Stream::NewStub(channel_)),
      event_stub_(v1::Event::NewStub(channel_)),
      copy_stub_(v1::Copy::NewStub(channel_)),
      comm_stub_(v1::Comm::NewStub(channel_)),
      group_stub_(v1::Group::NewStub(channel_)),
      random_stub_(v1::Random::NewStub(channel_)),
      nvtx_stub_(v1::Nvtx::NewStub(channel_)),
      profile_stub_(v1::Profile::NewStub(channel_)),
      staging_buffer_size_(options.staging_buffer_size),
      max_inline_copy_(options.max_inline_copy),
      frees_([this](const FreeBatch& frees) { return SendFrees(frees); },
             options.free_batch_delay) {}

Client::~Client() {
  GPUMUX_PROFILED("Client::~Client");
  Impl& impl = *impl_;
  {
    // Its completion events are destroyed while the session still lives.
    absl::MutexLock lock(&impl.staging_mu_);
    impl.staging_.reset();
  }
  {
    // Returns its leases through the batcher, which Stop below flushes.
    absl::MutexLock lock(&impl.answers_mu_);
    impl.local_.reset();
  }
  if (impl.session_ != nullptr) {
    absl::Status flushed = impl.frees_.Stop();
    // With the session gone (or the daemon: UNAVAILABLE) the daemon has
    // released everything anyway.
    if (!flushed.ok() && !impl.session_->ended() && !absl::IsUnavailable(flushed)) {
      spdlog::warn("gpumux: freeing queued allocations at exit failed: {}", flushed.ToString());
    }
    // The daemon drops the fences of a closed session without waiting: the
    // kernels they stand for must have finished before the memory goes.
    WaitForFreeFences();
    impl.session_->Close().IgnoreError();
  }
  impl.mapper_.UnmapAll();
}

const std::string& Client::address() const { return impl_->address_; }
SessionId Client::session_id() const { return impl_->session_id_; }
const std::string& Client::tenant() const { return impl_->session_->opened().tenant(); }
const std::string& Client::backend() const { return impl_->session_->opened().backend(); }
const std::string& Client::daemon_build() const { return impl_->session_->opened().daemon_build(); }

const std::string& Client::daemon_version() const {
  return impl_->session_->opened().daemon_version();
}
bool Client::session_ended() const {
  return impl_->session_ == nullptr || impl_->session_->ended();
}
DeviceIndex Client::CurrentDevice() const { return impl_->current_.device(); }
size_t MappedSegmentCountForTest(const Client& client) { return ImplOf(client).mapper_.size(); }
void* StatsPageForTest(const Client& client) {
  auto& impl = ImplOf(client);
  return impl.local_ == nullptr ? nullptr : impl.local_->StatsPageForTest();
}
uint64_t OpenedMappingCountForTest(const Client& client) { return ImplOf(client).mapper_.opened(); }

absl::Status Client::Impl::CallWithSession(
    absl::FunctionRef<grpc::Status(grpc::ClientContext*)> call) {
  if (session_ == nullptr) return absl::FailedPreconditionError("the client has no session");
  if (session_->ended()) return SessionEndedError();
  grpc::ClientContext context;
  context.AddMetadata(kSessionMetadataKey, credentials_);
  if (HostProfiler::Active() != nullptr) {
    // The daemon names this call in the records of the device work it queues.
    if (const uint64_t call_id = HostProfiler::CurrentCall(); call_id != 0) {
      context.AddMetadata(kCallMetadataKey, absl::StrCat(call_id));
    }
  }
  const grpc::Status status = call(&context);
  // Our own credentials refused. The daemon closes a session before it ends
  // its stream (an operator's kill, shutdown), so give the end a moment to
  // arrive and report it; a stream that stays open means the daemon
  // answering is not the one that opened the session.
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return session_->AwaitEnded(absl::Seconds(1)) ? SessionEndedError() : RestartedError();
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && session_->ended())
    return SessionEndedError();
  return FromGrpcStatus(status, address_);
}

absl::Status Client::Impl::RestartedError() const {
  return absl::UnavailableError(
      absl::StrCat("session ", session_->opened().session_id(),
                   " ended (the daemon restarted): reconnect with a new gpumux::Client"));
}

bool Client::Impl::DaemonAnswers() const {
  // A fresh channel: the session's may still be backing off from the old
  // daemon's end.
  return AskDeviceCount(address_, security_, absl::Seconds(1)).ok();
}

bool Client::IsAvailable(absl::string_view address, absl::Duration timeout) {
  GPUMUX_PROFILED("Client::IsAvailable");
  absl::StatusOr<int> count = AskDeviceCount(address, ChannelSecurity(), timeout);
  return count.ok() && *count > 0;
}

absl::Status Client::Impl::CheckSession() {
  if (session_ == nullptr) return absl::FailedPreconditionError("the client has no session");
  return session_->ended() ? SessionEndedError() : absl::OkStatus();
}

absl::Status Client::Impl::SessionEndedError() {
  // The stream's final status says why. UNAVAILABLE: the daemon went away
  // (it shut down, or died and the stream broke); if one answers again now,
  // it is a new daemon that knows nothing of this session.
  const grpc::Status final_grpc = session_->FinalGrpcStatus();
  // An operator's kill (Admin.KillSession) ends the stream with UNAVAILABLE
  // "session N was killed by an operator: <reason>", as admin.proto says;
  // the daemon still runs, but this is no restart.
  const std::string killed =
      absl::StrCat("session ", session_->opened().session_id(), " was killed by an operator");
  if (final_grpc.error_code() == grpc::StatusCode::UNAVAILABLE &&
      absl::StartsWith(final_grpc.error_message(), killed)) {
    return absl::UnavailableError(
        absl::StrCat(final_grpc.error_message(), "; reconnect with a new gpumux::Client"));
  }
  absl::Status final_status = session_->Close();
  if (absl::IsUnavailable(final_status)) {
    if (DaemonAnswers()) return RestartedError();
    return UnreachableError(
        address_, absl::StrCat("session ", session_->opened().session_id(),
                               " ended when it stopped (", final_status.message(),
                               "); reconnect with a new gpumux::Client once it runs again"));
  }
  return UnreachableError(
      address_, final_status.ok() ? std::string("gpumuxd ended the session")
                                  : absl::StrCat("the session ended: ", final_status.ToString()));
}

absl::Status Client::Ping() {
  GPUMUX_PROFILED("Client::Ping");
  v1::PingRequest request;
  v1::PingResponse response;
  return impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->session_stub_->Ping(context, request, &response);
  });
}

// --- Devices ---------------------------------------------------------------

absl::StatusOr<int> Client::DeviceCount() {
  GPUMUX_PROFILED("Client::DeviceCount");
  v1::GetDeviceCountRequest request;
  v1::GetDeviceCountResponse response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->device_stub_->GetDeviceCount(context, request, &response);
  }));
  return response.count();
}

absl::StatusOr<std::string> Client::GetDeviceName(DeviceIndex device) {
  GPUMUX_PROFILED("Client::GetDeviceName");
  GPUMUX_ASSIGN_OR_RETURN(DeviceProperties properties, GetDeviceProperties(device));
  return std::move(properties.name);
}

absl::StatusOr<DeviceProperties> Client::GetDeviceProperties(DeviceIndex device) {
  GPUMUX_PROFILED("Client::GetDeviceProperties");
  v1::GetDevicePropertiesRequest request;
  request.set_device(device.value());
  v1::DeviceProperties response;
  GPUMUX_RETURN_IF_ERROR(impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->device_stub_->GetDeviceProperties(context, request, &response);
  }));
  return FromProto(response);
}

absl::Status Client::Synchronize(DeviceIndex device) {
  GPUMUX_PROFILED_WAIT("Client::Synchronize");
  // This process's own kernels on the device first, as torch.cuda.synchronize
  // waits for them; then the session's work the daemon queued there.
  if (absl::StatusOr<std::string> bus_id = impl_->PciBusId(device); bus_id.ok()) {
    GPUMUX_RETURN_IF_ERROR(SynchronizeOwnCudaWork(*bus_id));
  }
  impl_->FlushFreesBeforeCall();
  v1::SynchronizeRequest request;
  request.set_device(device.value());
  v1::SynchronizeResponse response;
  return impl_->CallWithSession([&](grpc::ClientContext* context) {
    return impl_->device_stub_->Synchronize(context, request, &response);
  });
}

absl::StatusOr<std::pair<int, int>> Client::GetDeviceCapability(std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("Client::GetDeviceCapability");
  GPUMUX_ASSIGN_OR_RETURN(DeviceProperties properties,
                          GetDeviceProperties(device.value_or(CurrentDevice())));
  return std::make_pair(properties.major, properties.minor);
}

absl::StatusOr<DeviceProperties> Client::Impl::BuildProperties() {
  GPUMUX_ASSIGN_OR_RETURN(int count, CachedDeviceCount());
  if (count == 0) return DeviceProperties();
  return self_.GetDeviceProperties(DeviceIndex(0));
}

absl::StatusOr<std::vector<std::string>> Client::GetArchList() {
  GPUMUX_PROFILED("Client::GetArchList");
  GPUMUX_ASSIGN_OR_RETURN(DeviceProperties build, impl_->BuildProperties());
  return std::move(build.arch_list);
}

absl::StatusOr<std::string> Client::GetGencodeFlags() {
  GPUMUX_PROFILED("Client::GetGencodeFlags");
  GPUMUX_ASSIGN_OR_RETURN(DeviceProperties build, impl_->BuildProperties());
  return std::move(build.gencode_flags);
}

absl::Status Client::Init() {
  GPUMUX_PROFILED("Client::Init");
  GPUMUX_RETURN_IF_ERROR(impl_->CachedDeviceCount().status());
  if (impl_->memory_files_ != nullptr) GPUMUX_RETURN_IF_ERROR(impl_->memory_files_->Connect());
  return absl::OkStatus();
}

bool Client::IsInitialized() const {
  {
    absl::MutexLock lock(&impl_->device_count_mu_);
    if (!impl_->device_count_.has_value()) return false;
  }
  return impl_->memory_files_ == nullptr || impl_->memory_files_->connected();
}

absl::StatusOr<void*> Client::CurrentBlasHandle() {
  GPUMUX_PROFILED("Client::CurrentBlasHandle");
  GPUMUX_RETURN_IF_ERROR(impl_->CheckSession());
  if (backend() != "cuda") {
    return absl::FailedPreconditionError(absl::StrCat(
        "current_blas_handle needs a CUDA daemon; this daemon's backend is ", backend()));
  }
  GPUMUX_ASSIGN_OR_RETURN(std::string pci_bus_id, impl_->PciBusId(CurrentDevice()));
  return CurrentCublasHandle(pci_bus_id);
}

absl::StatusOr<std::string> Client::Impl::PciBusId(DeviceIndex device) {
  {
    absl::MutexLock lock(&pci_bus_ids_mu_);
    if (auto it = pci_bus_ids_.find(device); it != pci_bus_ids_.end()) return it->second;
  }
  GPUMUX_ASSIGN_OR_RETURN(DeviceProperties properties, self_.GetDeviceProperties(device));
  absl::MutexLock lock(&pci_bus_ids_mu_);
  pci_bus_ids_[device] = properties.pci_bus_id;
  return properties.pci_bus_id;
}

// --- Allocation ------------------------------------------------------------

absl::StatusOr<DeviceBuffer> memory::Allocate(Client& client, uint64_t size, DeviceIndex device,
                                              const AllocateOptions& options) {
  GPUMUX_PROFILED("memory::Allocate");
  auto& impl = ImplOf(client);
  GPUMUX_ASSIGN_OR_RETURN(const Stream stream,
                          impl.ResolveStream(options.stream, device, "the allocation"));
  if (impl.local_ != nullptr && !options.shareable) {
    // A cached block asks the daemon nothing, so the session's end is
    // checked here: the leases of an ended session are no longer its.
    GPUMUX_RETURN_IF_ERROR(impl.CheckSession());
    const LocalStream pool = impl.PoolStream(options, stream);
    GPUMUX_ASSIGN_OR_RETURN(LocalBlock block,
                            impl.local_->Allocate(device, pool, stream.id(), size));
    return impl.LocalBuffer(block, device, size);
  }
  v1::AllocateRequest request;
  request.set_device(device.value());
  request.set_size(size);
  request.set_stream(stream.id().value());
  request.set_shareable(options.shareable);
  const FreeBatch frees = impl.frees_.Take();
  for (AllocationId id : frees.ids) request.add_free_allocation_ids(id.value());
  for (const std::string& handle : frees.wait_event_handles)
    request.add_free_wait_event_handles(handle);
  v1::AllocateResponse response;
  absl::Status status = impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->Allocate(context, request, &response);
  });
  if (!status.ok()) {
    impl.SettleCarriedFrees(frees, "freeing queued allocations");
    return status;
  }
  return impl.Adopt(response.allocation());
}

std::optional<DeviceBuffer> memory::TryAllocateCached(Client& client, uint64_t size,
                                                      DeviceIndex device,
                                                      const AllocateOptions& options) {
  GPUMUX_PROFILED("memory::TryAllocateCached");
  auto& impl = ImplOf(client);
  if (impl.local_ == nullptr || options.shareable || impl.session_ == nullptr ||
      impl.session_->ended()) {
    return std::nullopt;
  }
  absl::StatusOr<Stream> stream = impl.ResolveStream(options.stream, device, "the allocation");
  if (!stream.ok()) return std::nullopt;
  std::optional<LocalBlock> block =
      impl.local_->TryAllocateCached(device, impl.PoolStream(options, *stream), size);
  if (!block.has_value()) return std::nullopt;
  return impl.LocalBuffer(*block, device, size);
}

LocalStream Client::Impl::PoolStream(const AllocateOptions& options, const Stream& stream) const {
  if (options.local_stream.has_value()) return *options.local_stream;
  if (cuda_local_streams_) return CurrentCudaLocalStream();
  return LocalStream(stream.id().value());
}

bool memory::TryFree(Client& client, DeviceBuffer& buffer) {
  GPUMUX_PROFILED("memory::TryFree");
  return ImplOf(client).TryFree(buffer);
}

bool Client::Impl::TryFree(DeviceBuffer& buffer) {
  if (!buffer.valid() || buffer.client_ != &self_ || !buffer.local_) return false;
  if (!local_->TryFree(buffer.device(), buffer.address())) return false;
  buffer.Detach();
  return true;
}

DeviceBuffer Client::Impl::LocalBuffer(const LocalBlock& block, DeviceIndex device, uint64_t size) {
  DeviceBuffer::Info info;
  info.id =
      AllocationId((uint64_t{1} << 63) | next_local_id_.fetch_add(1, std::memory_order_relaxed));
  info.lease = block.lease;
  info.device = device;
  info.size = size;
  info.allocated_size = block.size;
  info.address = block.address;
  info.segment_id = block.segment_id;
  info.offset = block.offset;
  info.cuda_device = block.cuda_device;
  info.local = true;
  info.local_stream = block.stream;
  return DeviceBuffer(&self_, info, block.data);
}

absl::StatusOr<DeviceBuffer> Client::Impl::Adopt(const v1::Allocation& allocation) {
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
  // Over TCP the segment is on another machine: the buffer has no pointer
  // here and is used through the daemon (inline copies).
  absl::StatusOr<void*> base =
      OverTcp() ? absl::UnimplementedError("over TCP nothing is mapped")
                : mapper_.Map(info.device, info.segment_id, allocation.segment_handle(),
                              allocation.segment_size(), memory_files_.get(), &info.cuda_device,
                              &allocation.pages());
  if (base.ok()) {
    data = static_cast<char*>(*base) + allocation.offset();
  } else if (!absl::IsUnimplemented(base.status())) {
    // Unimplemented: a handle this build cannot map (CUDA IPC); the allocation
    // is still usable through the daemon. Anything else is a failure.
    EnqueueFree(info.id);
    return base.status();
  }
  return DeviceBuffer(&self_, info, data);
}

void memory::Release(Client& /*client*/, DeviceBuffer&& buffer) {
  DeviceBuffer doomed(std::move(buffer));
}

absl::Status memory::Free(Client& client, DeviceBuffer&& buffer) {
  GPUMUX_PROFILED("memory::Free");
  return ImplOf(client).Free(std::move(buffer));
}

absl::Status Client::Impl::Free(DeviceBuffer&& buffer) {
  if (!buffer.valid()) return absl::InvalidArgumentError("cannot free an empty DeviceBuffer");
  if (buffer.client_ != &self_) {
    const AllocationId foreign = buffer.id();
    DeviceBuffer doomed(std::move(buffer));  // consumed: its own client frees it
    return absl::InvalidArgumentError(
        absl::StrCat("allocation ", ToString(foreign), " belongs to another Client"));
  }
  const int cuda_device = buffer.cuda_device_;
  if (buffer.local_) {
    const DeviceIndex device = buffer.device();
    const uint64_t address = buffer.address();
    const LocalStream stream = buffer.local_stream_;
    buffer.Detach();
    FreeLocal(device, address, stream);
    return absl::OkStatus();
  }
  FreeBatch free;
  free.ids.push_back(buffer.Detach());
  if (std::string fence = FreeFence(cuda_device); !fence.empty())
    free.wait_event_handles.push_back(fence);
  FlushFreesBeforeCall();
  return SendFrees(free);
}

absl::Status memory::Free(Client& client, DeviceBuffer&& buffer,
                          absl::Span<const std::string> wait_event_handles) {
  GPUMUX_PROFILED("memory::Free");
  return ImplOf(client).Free(std::move(buffer), wait_event_handles);
}

absl::Status Client::Impl::Free(DeviceBuffer&& buffer,
                                absl::Span<const std::string> wait_event_handles) {
  if (!buffer.valid()) return absl::InvalidArgumentError("cannot free an empty DeviceBuffer");
  if (buffer.client_ != &self_) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocation ", ToString(buffer.id()), " belongs to another Client"));
  }
  for (const std::string& handle : wait_event_handles) {
    if (handle.size() != kEventIpcHandleBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("cudaIpcEventHandle_t expects byte-like object of size ",
                       kEventIpcHandleBytes, ", but got ", handle.size()));
    }
  }
  if (buffer.local_) {
    // The daemon opens each handle, refusing one as its Free would (before
    // anything is freed); the allocator reuses the block once the opened
    // events completed.
    std::vector<std::function<bool()>> completed;
    for (const std::string& handle : wait_event_handles) {
      GPUMUX_ASSIGN_OR_RETURN(Event opened, self_.OpenEventIpcHandle(buffer.device(), handle));
      completed.push_back([event = std::make_shared<Event>(std::move(opened))] {
        absl::StatusOr<bool> done = event->Query();
        return !done.ok() || *done;  // a failed query (the session ended) holds nothing back
      });
    }
    const DeviceIndex device = buffer.device();
    const uint64_t address = buffer.address();
    const LocalStream stream = buffer.local_stream_;
    buffer.Detach();
    local_->Free(device, address, stream, absl::MakeSpan(completed));
    return absl::OkStatus();
  }
  v1::FreeRequest request;
  request.add_allocation_ids(buffer.id().value());
  for (const std::string& handle : wait_event_handles) request.add_wait_event_handles(handle);
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

absl::Status memory::RecordStream(Client& client, const DeviceBuffer& buffer,
                                  const Stream& stream) {
  GPUMUX_PROFILED("memory::RecordStream");
  return ImplOf(client).RecordStream(buffer, stream);
}

absl::Status Client::Impl::RecordStream(const DeviceBuffer& buffer, const Stream& stream) {
  if (!buffer.valid()) {
    return absl::InvalidArgumentError("cannot record a stream on an empty DeviceBuffer");
  }
  // Checked here: stream 0 on the wire is the default stream of the
  // allocation's device, whichever device the caller meant.
  GPUMUX_RETURN_IF_ERROR(
      ResolveStream(stream, buffer.device(), absl::StrCat("allocation ", ToString(buffer.id())))
          .status());
  if (buffer.local_) {
    // Another Client's block is in another allocator: as foreign as another
    // session's allocation is to the daemon.
    if (buffer.client_ != &self_) {
      return absl::NotFoundError(
          absl::StrCat("allocation ", ToString(buffer.id()), " belongs to another Client"));
    }
    GPUMUX_RETURN_IF_ERROR(CheckKnownStream(stream));
    // Work on a gpumux stream is the daemon's, waited for through its
    // events. On the host backend a block's pool is its gpumux stream, so
    // that one orders its own reuse (PyTorch's recordStream ignores the
    // allocation stream); on CUDA the pool is a CUDA stream, which orders
    // nothing the daemon queues.
    local_->RecordDaemonWork(buffer.device(), buffer.address(), stream.id(),
                             /*even_allocation_stream=*/cuda_local_streams_);
    return absl::OkStatus();
  }
  FlushFreesBeforeCall();
  v1::RecordStreamRequest request;
  request.set_allocation_id(buffer.id().value());
  request.set_stream(stream.id().value());
  v1::RecordStreamResponse response;
  return CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->RecordStream(context, request, &response);
  });
}

absl::Status memory::RecordStream(Client& client, const DeviceBuffer& buffer, LocalStream stream) {
  GPUMUX_PROFILED("memory::RecordStream");
  return ImplOf(client).RecordStream(buffer, stream);
}

absl::Status Client::Impl::RecordStream(const DeviceBuffer& buffer, LocalStream stream) {
  if (!buffer.valid()) {
    return absl::InvalidArgumentError("cannot record a stream on an empty DeviceBuffer");
  }
  if (buffer.client_ != &self_) {
    return absl::NotFoundError(
        absl::StrCat("allocation ", ToString(buffer.id()), " belongs to another Client"));
  }
  if (buffer.local_) {
    local_->RecordStream(buffer.device(), buffer.address(), buffer.local_stream_, stream);
  }
  return absl::OkStatus();
}

absl::Status memory::FlushFrees(Client& client) { return ImplOf(client).frees_.Flush(); }

void Client::Impl::EnqueueFree(AllocationId id, DeviceIndex device, int cuda_device) {
  GPUMUX_PROFILED("memory::Release");
  const std::string fence = FreeFence(cuda_device);
  if (frees_.Enqueue(id, fence, device)) return;
  // The batch is full, or fences of another device are queued: they leave
  // first (rare: fenced frees on two GPUs within one batch's millisecond,
  // from racing threads).
  do {
    FlushFreesBeforeCall();
  } while (!frees_.Enqueue(id, fence, device));
}

void Client::Impl::FreeLocal(DeviceIndex device, uint64_t address, LocalStream stream) {
  local_->Free(device, address, stream);
}

absl::StatusOr<uint64_t> Client::Impl::WireOffset(const DeviceBuffer& buffer, uint64_t offset,
                                                  uint64_t size, absl::string_view role) const {
  if (!buffer.local_) return offset;
  if (offset > buffer.size() || size > buffer.size() - offset) {
    return absl::OutOfRangeError(absl::StrCat(size, " bytes at offset ", offset, " do not fit the ",
                                              role, " allocation of ", buffer.size(), " bytes"));
  }
  return buffer.offset() + offset;
}

void Client::Impl::NoteDaemonWork(const DeviceBuffer& buffer, const Stream& stream, bool waited) {
  if (!buffer.local_ || waited) return;
  local_->RecordDaemonWork(buffer.device(), buffer.address(), stream.id());
}

std::string Client::Impl::FreeFence(int cuda_device) {
  return cuda_device < 0 ? std::string() : RecordFreeFence(cuda_device);
}

absl::Status Client::Impl::SendFrees(const FreeBatch& frees) {
  v1::FreeRequest request;
  for (AllocationId id : frees.ids) request.add_allocation_ids(id.value());
  for (const std::string& handle : frees.wait_event_handles) request.add_wait_event_handles(handle);
  v1::FreeResponse response;
  return CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->Free(context, request, &response);
  });
}

void Client::Impl::SettleCarriedFrees(const FreeBatch& frees, absl::string_view what) {
  if (frees.ids.empty()) return;
  absl::Status resent = SendFrees(frees);
  if (!resent.ok() && !absl::IsNotFound(resent) && !absl::IsUnavailable(resent)) {
    spdlog::warn("gpumux: {} failed: {}", std::string(what), resent.ToString());
  }
}

void Client::Impl::FlushFreesBeforeCall() {
  if (absl::Status status = frees_.Flush(); !status.ok() && !absl::IsUnavailable(status)) {
    spdlog::warn("gpumux: freeing queued allocations failed: {}", status.ToString());
  }
}

void Client::Impl::OnNotice(const v1::SessionServerMessage& notice) {
  switch (notice.kind_case()) {
    case v1::SessionServerMessage::kSegmentReleased: {
      const v1::SegmentReleased& released = notice.segment_released();
      if (released.size() > 0) {
        mapper_.UnmapPages(DeviceIndex(released.device()), SegmentId(released.segment_id()),
                           released.offset(), released.size());
      } else {
        mapper_.Unmap(DeviceIndex(released.device()), SegmentId(released.segment_id()));
      }
      break;
    }
    case v1::SessionServerMessage::kReleaseCached:
      ReleaseCachedForDaemon(notice.release_cached());
      break;
    case v1::SessionServerMessage::kBlocksRequest:
      ListLeaseBlocks(notice.blocks_request().request_id());
      break;
    case v1::SessionServerMessage::kStartProfiling:
      StartProfilingForDaemon(notice.start_profiling());
      break;
    case v1::SessionServerMessage::kStopProfiling:
      StopProfilingForDaemon(notice.stop_profiling().window_id());
      break;
    default:
      break;  // notices this version does not know are ignored, so newer daemons work
  }
}

void Client::Impl::StartProfilingForDaemon(const v1::StartProfiling& request) {
  absl::StatusOr<ProfileRegion::Mark> mark = HostProfiler::BeginWindow(
      std::clamp<uint64_t>(request.capacity(), 1, ProfileRegion::kMaxCapacity));
  absl::MutexLock lock(&answers_mu_);
  if (mark.ok()) {
    profile_windows_.emplace(request.window_id(), *std::move(mark));
  } else {
    spdlog::warn("gpumux: cannot record the host side of a profile: {}", mark.status().ToString());
  }
}

void Client::Impl::StopProfilingForDaemon(uint64_t window) {
  std::optional<ProfileRegion::Mark> mark;
  {
    absl::MutexLock lock(&answers_mu_);
    auto it = profile_windows_.find(window);
    if (it != profile_windows_.end()) {
      mark = std::move(it->second);
      profile_windows_.erase(it);
    }
  }
  if (!mark.has_value()) return;  // not started here: the daemon reports the host side missing
  v1::SessionClientMessage answer;
  answer.mutable_host_profile()->set_window_id(window);
  ToProto(HostProfiler::EndWindow(*mark), answer.mutable_host_profile()->mutable_records());
  session_->Send(answer);
}

void Client::Impl::ReleaseCachedForDaemon(const v1::ReleaseCached& request) {
  const DeviceIndex device(request.device());
  absl::MutexLock lock(&answers_mu_);
  if (local_ != nullptr && device.value() >= 0 && device.value() < local_->device_count()) {
    // The leases return through the batcher: sent now, so the daemon has
    // them back before it reads the answer.
    local_->EmptyCache(device);
    if (absl::Status sent = frees_.Flush(); !sent.ok() && !absl::IsUnavailable(sent)) {
      spdlog::warn("gpumux: returning cached leases for the daemon failed: {}", sent.ToString());
    }
  }
  v1::SessionClientMessage answer;
  answer.mutable_cache_released()->set_request_id(request.request_id());
  session_->Send(answer);
}

void Client::Impl::ListLeaseBlocks(uint64_t request) {
  // In messages of at most kMaxAnswerBlocks blocks each, well within the
  // daemon's message size.
  constexpr size_t kMaxAnswerBlocks = 16384;
  std::vector<SegmentSnapshot> segments;
  {
    absl::MutexLock lock(&answers_mu_);
    if (local_ != nullptr) segments = local_->Snapshot(std::nullopt);
  }
  v1::SessionClientMessage answer;
  v1::LeaseBlocks* blocks = answer.mutable_lease_blocks();
  blocks->set_request_id(request);
  size_t in_message = 0;
  for (const SegmentSnapshot& segment : segments) {
    if (in_message > 0 && in_message + segment.blocks.size() > kMaxAnswerBlocks) {
      if (!session_->Send(answer)) return;
      blocks->clear_segments();
      in_message = 0;
    }
    ToProto(segment, blocks->add_segments());
    in_message += segment.blocks.size();
  }
  blocks->set_last(true);
  session_->Send(answer);
}

// --- Sharing ---------------------------------------------------------------

absl::StatusOr<std::string> memory::Share(Client& client, const DeviceBuffer& buffer) {
  GPUMUX_PROFILED("memory::Share");
  return ImplOf(client).Share(buffer);
}

absl::StatusOr<std::string> Client::Impl::Share(const DeviceBuffer& buffer) {
  if (!buffer.valid()) return absl::InvalidArgumentError("cannot share an empty DeviceBuffer");
  if (buffer.local_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "allocation ", ToString(buffer.id()),
        " is not shareable: it is a block of this client's own allocator; allocate it with "
        "AllocateOptions.shareable"));
  }
  FlushFreesBeforeCall();
  v1::ShareRequest request;
  request.set_allocation_id(buffer.id().value());
  v1::ShareResponse response;
  GPUMUX_RETURN_IF_ERROR(CallWithSession([&](grpc::ClientContext* context) {
    return memory_stub_->Share(context, request, &response);
  }));
  return std::move(*response.mutable_token());
}

absl::StatusOr<DeviceBuffer> memory::Import(Client& client, absl::string_view token) {
  GPUMUX_PROFILED("memory::Import");
  auto& impl = ImplOf(client);
  impl.FlushFreesBeforeCall();
  v1::ImportRequest request;
  request.set_token(std::string(token));
  v1::ImportResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.memory_stub_->Import(context, request, &response);
  }));
  return impl.Adopt(response.allocation());
}

absl::StatusOr<CollectedMappings> memory::IpcCollect(Client& client) {
  GPUMUX_PROFILED("memory::IpcCollect");
  auto& impl = ImplOf(client);
  GPUMUX_RETURN_IF_ERROR(impl.CheckSession());
  impl.FlushFreesBeforeCall();
  // Freed buffers' memory may still be in use by this process's kernels
  // until their fences complete.
  WaitForFreeFences();
  const SegmentMapper::Unmapped unmapped = impl.mapper_.UnmapUnused();
  return CollectedMappings{.mappings = unmapped.mappings, .bytes = unmapped.bytes};
}

}  // namespace gpumux
