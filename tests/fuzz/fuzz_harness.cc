#include "tests/fuzz/fuzz_harness.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/net/admin_socket.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"

namespace gpumux::fuzz {

__attribute__((weak)) const char* FuzzAllocatorConf() { return ""; }
namespace {

constexpr uint64_t kDeviceMemory = uint64_t{64} << 20;
// The figures of the session's books the leak check compares.
constexpr const char* kStatKeys[] = {"allocation.all.current", "allocated_bytes.all.current",
                                     "requested_bytes.all.current"};
// Request bytes shown when an invariant breaks (libFuzzer saves them all).
constexpr size_t kShownRequestBytes = 256;

std::string ShowStatus(const grpc::Status& status) {
  // gRPC's codes are absl's (both are google.rpc.Code).
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                      " '", status.error_message(), "'");
}

void DrainCompletionQueue(grpc::CompletionQueue& cq) {
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace

void FuzzHarness::Fail(absl::string_view what) {
  std::fprintf(stderr, "\ngpumux fuzz: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  abort();
}

FuzzHarness& FuzzHarness::Get() {
  static FuzzHarness* harness = nullptr;
  if (harness == nullptr) {
    harness = new FuzzHarness();
    // The daemon shuts down at exit, so LeakSanitizer's exit check also sees
    // what its shutdown did not free.
    std::atexit([] { delete harness; });
  }
  return *harness;
}

FuzzHarness::FuzzHarness() {
  // Never balanced: otherwise the last gRPC object's destructor runs
  // grpc_shutdown, which in gRPC 1.51 may wait 10 s for an executor thread.
  grpc_init();
  // Every input makes the daemon log (parse failures are warnings); only
  // errors are worth reading next to libFuzzer's lines.
  if (!SetLogLevel("error").ok()) Fail("cannot set the log level");
  if (const char* every = getenv("GPUMUX_FUZZ_LEAK_CHECK_EVERY"); every != nullptr) {
    if (!absl::SimpleAtoi(every, &leak_check_interval_) || leak_check_interval_ < 1) {
      Fail("GPUMUX_FUZZ_LEAK_CHECK_EVERY must be a positive number");
    }
  }
  char pattern[] = "/tmp/gpumux-fuzz-XXXXXX";
  if (mkdtemp(pattern) == nullptr) Fail("mkdtemp failed");
  dir_ = pattern;
  Daemon::Options options;
  options.socket_path = dir_ + "/gpumux.sock";
  options.backend = "host";
  options.host_devices = FuzzFixture::kDevices;
  options.host_device_memory = kDeviceMemory;
  options.allocator_conf = FuzzAllocatorConf();
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
  if (!daemon.ok()) Fail(absl::StrCat("the daemon did not start: ", daemon.status().ToString()));
  daemon_ = *std::move(daemon);
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);  // as libgpumux: inline copies reach 64 MiB
  channel_ = grpc::CreateCustomChannel("unix://" + options.socket_path,
                                       grpc::InsecureChannelCredentials(), arguments);
  admin_channel_ = grpc::CreateChannel("unix://" + AdminSocketPath(options.socket_path),
                                       grpc::InsecureChannelCredentials());

  session_stream_ = Stub<v1::Session>().Open(&session_context_);
  v1::SessionClientMessage open;
  open.mutable_open()->set_client_name("fuzz");
  open.mutable_open()->set_pid(getpid());
  v1::SessionServerMessage opened;
  if (!session_stream_->Write(open) || !session_stream_->Read(&opened) || !opened.has_opened()) {
    Fail(absl::StrCat("cannot open the session: ", ShowStatus(session_stream_->Finish())));
  }
  session_id_ = opened.opened().session_id();
  session_metadata_ = absl::StrCat(session_id_, ":", opened.opened().secret());

  MakeFixture();
  if (session_id_ != FuzzFixture::kSession ||
      fixture_.allocation_on_device0 != FuzzFixture::kAllocationOnDevice0 ||
      fixture_.allocation_on_device1 != FuzzFixture::kAllocationOnDevice1 ||
      fixture_.shareable_allocation != FuzzFixture::kShareableAllocation ||
      fixture_.stream != FuzzFixture::kStream ||
      fixture_.timing_event != FuzzFixture::kTimingEvent ||
      fixture_.interprocess_event != FuzzFixture::kInterprocessEvent) {
    Fail(
        "a fresh daemon numbered the session or the fixture otherwise than FuzzFixture says (and "
        "the seeds name)");
  }
  Settle();
  baseline_ = ReadBooks();
}

FuzzHarness::~FuzzHarness() {
  session_stream_->WritesDone();
  v1::SessionServerMessage drain;
  while (session_stream_->Read(&drain)) {
  }
  session_stream_->Finish();
  daemon_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::unique_ptr<grpc::ClientContext> FuzzHarness::Context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata("gpumux-session", session_metadata_);
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(kCallDeadline));
  return context;
}

void FuzzHarness::CheckStatus(absl::string_view call, const grpc::Status& status,
                              absl::string_view request) const {
  switch (status.error_code()) {
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      break;
    default:
      return;
  }
  Fail(absl::StrCat(
      call, " answered ", ShowStatus(status),
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
          ? absl::StrCat(" (it did not return within ", absl::FormatDuration(kCallDeadline), ")")
          : "",
      "; request (", request.size(),
      " bytes): ", absl::BytesToHexString(request.substr(0, kShownRequestBytes)),
      request.size() > kShownRequestBytes ? "..." : ""));
}

const std::shared_ptr<grpc::Channel>& FuzzHarness::ChannelFor(absl::string_view method) const {
  static const std::string admin = absl::StrCat("/", v1::Admin::service_full_name(), "/");
  return absl::StartsWith(method, admin) ? admin_channel_ : channel_;
}

grpc::Status FuzzHarness::CallRaw(const std::string& method, absl::string_view request,
                                  std::string* response) {
  std::unique_ptr<grpc::ClientContext> context = Context();
  grpc::Slice slice(request.data(), request.size());
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer reply;
  grpc::Status status;
  grpc::GenericStub stub(ChannelFor(method));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(context.get(), method, request_buffer, &cq);
  call->StartCall();
  call->Finish(&reply, &status, this);
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  DrainCompletionQueue(cq);
  CheckStatus(absl::StrCat(method, " (raw bytes)"), status, request);
  response->clear();
  std::vector<grpc::Slice> slices;
  if (status.ok() && reply.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      response->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return status;
}

grpc::Status FuzzHarness::OpenRaw(const std::vector<std::string>& messages) {
  std::unique_ptr<grpc::ClientContext> context = Context();
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(context.get(), "/gpumux.v1.Session/Open", &cq);
  void* tag = nullptr;
  bool ok = false;
  // One operation at a time, each waited for: the tag does not matter.
  auto step = [&] { return cq.Next(&tag, &ok) && ok; };
  call->StartCall(this);
  bool open = step();
  for (const std::string& bytes : messages) {
    if (!open) break;
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, this);
    open = step();  // false once the daemon ended the stream
  }
  call->WritesDone(this);
  step();
  grpc::ByteBuffer reply;
  do {
    call->Read(&reply, this);
  } while (step());
  grpc::Status status;
  call->Finish(&status, this);
  step();
  DrainCompletionQueue(cq);
  CheckStatus("/gpumux.v1.Session/Open (raw bytes)", status,
              messages.empty() ? "" : messages.front());
  return status;
}

void FuzzHarness::Track(const v1::CreateStreamResponse& response) {
  v1::StreamRef ref;
  ref.set_device(response.device());
  ref.set_stream(response.stream());
  streams_.push_back(ref);
}

void FuzzHarness::TrackEvent(uint64_t event) {
  if (event != 0) events_.push_back(event);
}

void FuzzHarness::FinishInput() {
  v1::PingResponse pong;
  grpc::Status status = Stub<v1::Session>().Ping(Context().get(), v1::PingRequest(), &pong);
  if (!status.ok() || pong.session_id() != session_id_) {
    Fail(absl::StrCat("after the input, Session.Ping answered ", ShowStatus(status),
                      " for session ", pong.session_id(), " (expected ", session_id_, ")"));
  }
  if (++inputs_since_check_ >= leak_check_interval_) {
    inputs_since_check_ = 0;
    CheckForLeaks();
  }
}

void FuzzHarness::Expect(absl::string_view what, const grpc::Status& status,
                         bool may_be_gone) const {
  if (status.ok() || (may_be_gone && status.error_code() == grpc::StatusCode::NOT_FOUND)) return;
  Fail(absl::StrCat(what, ": ", ShowStatus(status)));
}

void FuzzHarness::MakeFixture() {
  auto allocation = [&](uint64_t& id, int device, bool shareable) {
    if (id != 0) {
      // A memset of no bytes is NOT_FOUND for an allocation that is gone.
      v1::MemsetRequest probe;
      probe.mutable_dst()->set_allocation_id(id);
      v1::CopyResponse done;
      grpc::Status status = Stub<v1::Copy>().Memset(Context().get(), probe, &done);
      Expect("probing a fixture allocation", status, /*may_be_gone=*/true);
      if (status.ok()) return;
    }
    v1::AllocateRequest request;
    request.set_device(device);
    request.set_size(FuzzFixture::kAllocationBytes);
    request.set_shareable(shareable);
    v1::AllocateResponse response;
    Expect("allocating for the fixture",
           Stub<v1::Memory>().Allocate(Context().get(), request, &response));
    id = response.allocation().allocation_id();
  };
  allocation(fixture_.allocation_on_device0, 0, false);
  allocation(fixture_.allocation_on_device1, 1, false);
  allocation(fixture_.shareable_allocation, 0, true);

  v1::StreamRequest stream_probe;
  stream_probe.mutable_stream()->set_stream(fixture_.stream);
  v1::QueryStreamResponse stream_state;
  grpc::Status status =
      fixture_.stream == 0 ? grpc::Status(grpc::StatusCode::NOT_FOUND, "")
                           : Stub<v1::Stream>().Query(Context().get(), stream_probe, &stream_state);
  Expect("probing the fixture stream", status, /*may_be_gone=*/true);
  if (!status.ok()) {
    v1::CreateStreamResponse created;
    Expect("creating the fixture stream",
           Stub<v1::Stream>().Create(Context().get(), v1::CreateStreamRequest(), &created));
    fixture_.stream = created.stream();
  }

  auto event = [&](uint64_t& id, bool enable_timing, bool interprocess) {
    if (id != 0) {
      v1::EventRequest probe;
      probe.set_event(id);
      v1::QueryEventResponse state;
      grpc::Status probed = Stub<v1::Event>().Query(Context().get(), probe, &state);
      Expect("probing a fixture event", probed, /*may_be_gone=*/true);
      if (probed.ok()) return;
    }
    v1::CreateEventRequest request;
    request.set_enable_timing(enable_timing);
    request.set_interprocess(interprocess);
    v1::CreateEventResponse created;
    Expect("creating a fixture event",
           Stub<v1::Event>().Create(Context().get(), request, &created));
    id = created.event();
  };
  event(fixture_.timing_event, true, false);
  event(fixture_.interprocess_event, false, true);

  // Staged copies need the session's staging buffer (the smallest).
  v1::StagingBuffer staging;
  Expect(
      "getting the staging buffer",
      Stub<v1::Copy>().GetStagingBuffer(Context().get(), v1::GetStagingBufferRequest(), &staging));
}

void FuzzHarness::CheckForLeaks() {
  for (uint64_t id : allocations_) {
    v1::FreeRequest request;
    request.add_allocation_ids(id);
    v1::FreeResponse response;
    Expect("freeing what the fuzzer allocated",
           Stub<v1::Memory>().Free(Context().get(), request, &response),
           /*may_be_gone=*/true);
  }
  for (const v1::StreamRef& ref : streams_) {
    v1::DestroyStreamRequest request;
    *request.mutable_stream() = ref;
    v1::DestroyStreamResponse response;
    Expect("destroying a stream the fuzzer created",
           Stub<v1::Stream>().Destroy(Context().get(), request, &response), /*may_be_gone=*/true);
  }
  for (uint64_t id : events_) {
    v1::EventRequest request;
    request.set_event(id);
    v1::DestroyEventResponse response;
    Expect("destroying an event the fuzzer got",
           Stub<v1::Event>().Destroy(Context().get(), request, &response),
           /*may_be_gone=*/true);
  }
  for (uint64_t id : profiles_) {
    v1::FinishProfileRequest request;
    request.set_profile_id(id);
    v1::DeviceProfileRecords response;
    Expect("finishing a profile the fuzzer started",
           Stub<v1::Profile>().Finish(Context().get(), request, &response), /*may_be_gone=*/true);
  }
  allocations_.clear();
  streams_.clear();
  events_.clear();
  profiles_.clear();
  for (int device = 0; device < FuzzFixture::kDevices; ++device) {
    v1::SetMemoryLimitRequest request;
    request.set_device(device);
    request.set_unlimited(true);
    v1::SetMemoryLimitResponse response;
    Expect("lifting the session's memory limit",
           Stub<v1::Memory>().SetMemoryLimit(Context().get(), request, &response));
  }
  {
    // An Admin input may have capped the session's own tenant.
    v1::SetTenantLimitRequest request;
    request.set_tenant(absl::StrCat("session-", session_id_));
    request.set_all_devices(true);
    request.set_unlimited(true);
    v1::SetTenantLimitResponse response;
    Expect("lifting the session's tenant limit",
           Stub<v1::Admin>().SetTenantLimit(Context().get(), request, &response));
  }
  MakeFixture();
  Settle();
  const std::string books = ReadBooks();
  if (books != baseline_) {
    Fail(absl::StrCat("leak: with what the fuzzer got freed, the books read\n", books,
                      "instead of the baseline\n", baseline_, "(one of the last ",
                      leak_check_interval_,
                      " inputs; GPUMUX_FUZZ_LEAK_CHECK_EVERY=1 checks after each)"));
  }
}

void FuzzHarness::Settle() {
  for (int device = 0; device < FuzzFixture::kDevices; ++device) {
    v1::SynchronizeRequest sync;
    sync.set_device(device);
    v1::SynchronizeResponse synced;
    grpc::Status synchronized = Stub<v1::Device>().Synchronize(Context().get(), sync, &synced);
    // A group collective queued with async_op that failed or did not run (a
    // group destroyed first) is reported once, by this synchronize; the
    // next one only waits.
    if (!synchronized.ok() &&
        absl::StrContains(synchronized.error_message(), "queued with async_op")) {
      synchronized = Stub<v1::Device>().Synchronize(Context().get(), sync, &synced);
    }
    Expect("synchronizing a device", synchronized);
    v1::AllocateRequest allocate;
    allocate.set_device(device);
    allocate.set_size(512);
    v1::AllocateResponse allocated;
    Expect("allocating to process completed frees",
           Stub<v1::Memory>().Allocate(Context().get(), allocate, &allocated));
    v1::FreeRequest free;
    free.add_allocation_ids(allocated.allocation().allocation_id());
    v1::FreeResponse freed;
    Expect("freeing it", Stub<v1::Memory>().Free(Context().get(), free, &freed));
  }
}

std::string FuzzHarness::ReadBooks() {
  std::string books;
  for (int device = 0; device < FuzzFixture::kDevices; ++device) {
    v1::ObserveStatsRequest request;
    request.set_device(device);
    request.set_session_id(session_id_);
    v1::MemoryStats stats;
    Expect("reading the session's stats",
           Stub<v1::Observe>().GetMemoryStats(Context().get(), request, &stats));
    absl::StrAppend(&books, "device ", device, ":");
    for (const char* key : kStatKeys) {
      auto value = stats.values().find(key);
      absl::StrAppend(&books, " ", key, "=",
                      value == stats.values().end() ? "missing" : absl::StrCat(value->second));
    }
    absl::StrAppend(&books, "\n");
  }
  v1::ListSessionsResponse sessions;
  Expect("listing sessions",
         Stub<v1::Observe>().ListSessions(Context().get(), v1::ListSessionsRequest(), &sessions));
  absl::StrAppend(&books, "sessions=", sessions.sessions_size(), "\n");
  for (const v1::SessionInfo& info : sessions.sessions()) {
    absl::StrAppend(&books, "session ", info.session_id(), ": streams=", info.streams(),
                    " events=", info.events());
    for (const v1::SessionDeviceUsage& usage : info.devices()) {
      absl::StrAppend(&books, " [device ", usage.device(), " allocated=", usage.allocated_bytes(),
                      " allocations=", usage.allocations(), " imported=", usage.imported_bytes(),
                      " limit=", usage.memory_limit_bytes(), "]");
    }
    absl::StrAppend(&books, "\n");
  }
  return books;
}

}  // namespace gpumux::fuzz
