// A table of bad inputs over every service against a real gpumuxd child
// process: each gets its exact status code and a message that says what was
// wrong, and the daemon keeps serving everyone afterwards with nothing leaked.
// Every new RPC adds its bad inputs here.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/net/admin_socket.h"
#include "gpumux/v1/admin.grpc.pb.h"
#include "gpumux/v1/comm.grpc.pb.h"
#include "gpumux/v1/copy.grpc.pb.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/group.grpc.pb.h"
#include "gpumux/v1/nvtx.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gpumux/v1/profile.grpc.pb.h"
#include "gpumux/v1/random.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/rpc/stream_calls.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

struct BadInput {
  std::string name;
  grpc::StatusCode expected;
  std::string message;  // a part of the message that says what was wrong
  std::function<grpc::Status()> call;
};

TEST(BadInputTest, EachGetsItsExactStatusAndTheDaemonKeepsServing) {
  DaemonProcess daemon({"--host-devices=2", "--host-device-memory=64MiB"});
  auto channel = daemon.channel();
  RawSession me(channel, "me");
  RawSession other(channel, "other");
  auto observe = v1::Observe::NewStub(channel);
  auto device = v1::Device::NewStub(channel);
  auto admin = v1::Admin::NewStub(grpc::CreateChannel(
      "unix://" + AdminSocketPath(daemon.socket_path()), grpc::InsecureChannelCredentials()));
  // Admin.SetTenantLimit of `limit` bytes on device `target`. Special
  // values: target kUnset leaves the device unset, kFalse sets all_devices
  // false, kNegative sets device -1; limit kUnset leaves it unset, kFalse
  // sets unlimited false.
  constexpr int kUnset = -1, kFalse = -2, kNegative = -3;
  auto tenant_limit = [&](const std::string& tenant, int target, int64_t limit,
                          v1::Admin::Stub* stub = nullptr) {
    v1::SetTenantLimitRequest request;
    request.set_tenant(tenant);
    if (target >= 0) request.set_device(target);
    if (target == kNegative) request.set_device(-1);
    if (target == kFalse) request.set_all_devices(false);
    if (limit >= 0) request.set_bytes(static_cast<uint64_t>(limit));
    if (limit == kFalse) request.set_unlimited(false);
    grpc::ClientContext context;
    v1::SetTenantLimitResponse response;
    return (stub == nullptr ? admin.get() : stub)->SetTenantLimit(&context, request, &response);
  };
  auto main_socket_admin = v1::Admin::NewStub(channel);
  const auto admin_channel = grpc::CreateChannel("unix://" + AdminSocketPath(daemon.socket_path()),
                                                 grpc::InsecureChannelCredentials());
  // A unary call of `method` by name, with an empty message, on `on`.
  auto call_by_name = [](const std::shared_ptr<grpc::Channel>& on, const std::string& method) {
    grpc::GenericStub generic(on);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice nothing("");
    grpc::ByteBuffer request(&nothing, 1);
    grpc::ByteBuffer reply;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  };
  auto kill = [&](uint64_t session, const std::string& reason, v1::Admin::Stub* stub = nullptr) {
    v1::KillSessionRequest request;
    request.set_session_id(session);
    request.set_reason(reason);
    grpc::ClientContext context;
    v1::KillSessionResponse response;
    return (stub == nullptr ? admin.get() : stub)->KillSession(&context, request, &response);
  };

  // Profiles: Profile on the main socket, Admin.ProfileSession on the admin
  // socket. `stranger` is another tenant's session.
  RawSession stranger(channel, "stranger", "pod-b");
  auto profiles = v1::Profile::NewStub(channel);
  auto start_profile = [&](uint64_t capacity, RawSession& by) {
    v1::StartProfileRequest request;
    request.set_capacity(capacity);
    v1::StartProfileResponse response;
    return profiles->Start(by.Context().get(), request, &response);
  };
  auto finish_profile = [&](uint64_t id, RawSession& by) {
    v1::FinishProfileRequest request;
    request.set_profile_id(id);
    v1::DeviceProfileRecords response;
    return profiles->Finish(by.Context().get(), request, &response);
  };
  // ProfileSession of `session` for `ms`, as `me` (stub null) or through
  // `admin_stub`.
  auto profile_session = [&](uint64_t session, int64_t ms, uint64_t capacity = 0,
                             v1::Admin::Stub* admin_stub = nullptr) {
    v1::ProfileSessionRequest request;
    request.set_session_id(session);
    request.set_duration_ms(ms);
    request.set_capacity(capacity);
    v1::ProfileSessionResponse response;
    if (admin_stub != nullptr) {
      grpc::ClientContext context;
      return admin_stub->ProfileSession(&context, request, &response);
    }
    return profiles->ProfileSession(me.Context().get(), request, &response);
  };
  v1::StartProfileResponse others_profile;
  ASSERT_TRUE(
      profiles->Start(other.Context().get(), v1::StartProfileRequest(), &others_profile).ok());

  v1::Allocation mine, theirs, freed, plain, shared;
  ASSERT_TRUE(me.Allocate(0, 4096, &mine).ok());
  ASSERT_TRUE(other.Allocate(0, 4096, &theirs).ok());
  ASSERT_TRUE(me.Allocate(0, 4096, &freed).ok());
  ASSERT_TRUE(me.Free({freed.allocation_id()}).ok());
  ASSERT_TRUE(me.Allocate(1, 4096, &plain).ok());
  ASSERT_TRUE(other.Allocate(1, 4096, &shared, /*shareable=*/true).ok());
  v1::ShareRequest share_request;
  share_request.set_allocation_id(shared.allocation_id());
  v1::ShareResponse token;
  ASSERT_TRUE(other.memory().Share(other.Context().get(), share_request, &token).ok());
  v1::ImportRequest first_import;
  first_import.set_token(token.token());
  v1::ImportResponse imported;
  ASSERT_TRUE(me.memory().Import(me.Context().get(), first_import, &imported).ok());

  auto import = [&](const std::string& t) {
    v1::ImportRequest request;
    request.set_token(t);
    v1::ImportResponse response;
    return me.memory().Import(me.Context().get(), request, &response);
  };
  auto share = [&](uint64_t id) {
    v1::ShareRequest request;
    request.set_allocation_id(id);
    v1::ShareResponse response;
    return me.memory().Share(me.Context().get(), request, &response);
  };
  auto limit = [&](double fraction) {
    v1::SetMemoryLimitRequest request;
    request.set_device(0);
    request.set_fraction(fraction);
    v1::SetMemoryLimitResponse response;
    return me.memory().SetMemoryLimit(me.Context().get(), request, &response);
  };

  // A float32 tensor of `shape` at `offset` into allocation `id`.
  auto tensor = [](uint64_t id, std::vector<int64_t> shape, uint64_t offset = 0,
                   v1::Dtype dtype = v1::DTYPE_FLOAT32) {
    v1::Tensor t;
    t.mutable_memory()->set_allocation_id(id);
    t.mutable_memory()->set_offset(offset);
    t.set_dtype(dtype);
    for (int64_t s : shape) t.add_shape(s);
    return t;
  };
  auto broadcast = [&](const v1::Tensor& t, std::vector<int64_t> devices, bool with_devices = true,
                       uint64_t stream = 0) {
    v1::BroadcastRequest request;
    *request.mutable_tensor() = t;
    if (with_devices) {
      for (int64_t d : devices) request.mutable_devices()->add_devices(d);
      request.mutable_devices();
    }
    if (stream != 0) (*request.mutable_options()->mutable_streams())[1] = stream;
    v1::CommResponse response;
    return me.comm().Broadcast(me.Context().get(), request, &response);
  };
  auto gather = [&](std::function<void(v1::GatherRequest&)> set) {
    v1::GatherRequest request;
    *request.add_tensors() = tensor(mine.allocation_id(), {4});
    set(request);
    v1::CommResponse response;
    return me.comm().Gather(me.Context().get(), request, &response);
  };
  // Groups of daemons. This daemon has no TCP listener: groups of one only
  // (Rendezvous is served on TCP; its bad inputs are in tcp_full_mode_test).
  auto groups = v1::Group::NewStub(channel);
  auto form = [&](const std::string& name, int32_t world, int32_t rank,
                  const std::string& rendezvous = "", int64_t timeout_ms = 0,
                  int32_t on_device = 0) {
    v1::FormGroupRequest request;
    request.set_name(name);
    request.set_world_size(world);
    request.set_rank(rank);
    request.set_rendezvous_address(rendezvous);
    request.set_timeout_ms(timeout_ms);
    request.set_device(on_device);
    v1::GroupInfo response;
    return groups->FormGroup(me.Context().get(), request, &response);
  };
  ASSERT_TRUE(form("solo", 1, 0).ok());
  auto group_all_reduce = [&](const std::string& group, const v1::Tensor& t, v1::ReduceOp op) {
    v1::GroupAllReduceRequest request;
    request.set_group(group);
    *request.mutable_tensor() = t;
    request.set_op(op);
    v1::CommResponse response;
    return groups->AllReduce(me.Context().get(), request, &response);
  };
  const uint64_t stream1 = NewStream(me, 1);
  const uint64_t event0 = NewEvent(me, 0);
  const uint64_t timing0 = NewEvent(me, 0, {.enable_timing = true});
  const uint64_t timing1 = NewEvent(me, 1, {.enable_timing = true});
  const uint64_t their_stream = NewStream(other, 0);
  const uint64_t their_event = NewEvent(other, 0);
  auto range = [](uint64_t id, uint64_t offset) {
    v1::DeviceRange r;
    r.set_allocation_id(id);
    r.set_offset(offset);
    return r;
  };
  auto memset = [&](uint64_t id, uint64_t offset, uint64_t size, uint32_t value,
                    uint64_t stream = 0) {
    v1::MemsetRequest request;
    *request.mutable_dst() = range(id, offset);
    request.set_size(size);
    request.set_value(value);
    request.mutable_options()->set_stream(stream);
    v1::CopyResponse response;
    return me.copy().Memset(me.Context().get(), request, &response);
  };
  auto upload = [&](uint64_t id, uint64_t offset, const std::string& data) {
    v1::HostToDeviceRequest request;
    *request.mutable_dst() = range(id, offset);
    request.set_data(data);
    v1::CopyResponse response;
    return me.copy().HostToDevice(me.Context().get(), request, &response);
  };
  auto download = [&](uint64_t id, uint64_t offset, uint64_t size) {
    v1::DeviceToHostRequest request;
    *request.mutable_src() = range(id, offset);
    request.set_inline_size(size);
    v1::DeviceToHostResponse response;
    return me.copy().DeviceToHost(me.Context().get(), request, &response);
  };
  auto generate = [&](uint64_t id, v1::Dtype dtype, uint64_t elements, double low, double high) {
    v1::GenerateRequest request;
    *request.mutable_dst() = range(id, 0);
    request.set_dtype(dtype);
    request.set_elements(elements);
    request.mutable_uniform()->set_low(low);
    request.mutable_uniform()->set_high(high);
    v1::GenerateResponse response;
    return me.random().Generate(me.Context().get(), request, &response);
  };
  auto set_rng_state = [&](const std::string& state) {
    v1::SetRngStateRequest request;
    request.set_device(0);
    request.add_states(state);
    v1::SetRngStateResponse response;
    return me.random().SetState(me.Context().get(), request, &response);
  };
  auto with_metadata = [&](const std::string& value) {
    auto stub = v1::Session::NewStub(channel);
    grpc::ClientContext context;
    if (!value.empty()) context.AddMetadata("gpumux-session", value);
    v1::PingResponse response;
    return stub->Ping(&context, v1::PingRequest(), &response);
  };
  auto open_with = [&](const std::string& name, int64_t pid = 1,
                       const std::string& profile_token = "") {
    auto stub = v1::Session::NewStub(channel);
    grpc::ClientContext context;
    auto stream = stub->Open(&context);
    v1::SessionClientMessage open;
    open.mutable_open()->set_client_name(name);
    open.mutable_open()->set_pid(pid);
    open.mutable_open()->set_profile_token(profile_token);
    stream->Write(open);
    stream->WritesDone();
    v1::SessionServerMessage reply;
    while (stream->Read(&reply)) {
    }
    return stream->Finish();
  };
  // A session stream that sends `messages` and half-closes.
  auto stream_of = [&](const std::vector<v1::SessionClientMessage>& messages) {
    auto stub = v1::Session::NewStub(channel);
    grpc::ClientContext context;
    auto stream = stub->Open(&context);
    for (const v1::SessionClientMessage& message : messages) stream->Write(message);
    stream->WritesDone();
    v1::SessionServerMessage reply;
    while (stream->Read(&reply)) {
    }
    return stream->Finish();
  };
  v1::SessionClientMessage open_message;
  open_message.mutable_open()->set_client_name("twice");
  v1::SessionClientMessage answer_message;
  answer_message.mutable_cache_released()->set_request_id(1);
  const std::string good_handle(64, '\x01');
  auto lease = [&](int32_t on_device, uint64_t size, uint64_t stream = 0, bool small = false) {
    v1::LeaseRequest request;
    request.set_device(on_device);
    request.set_size(size);
    request.set_stream(stream);
    request.set_small_pool(small);
    v1::AllocateResponse response;
    return me.memory().Lease(me.Context().get(), request, &response);
  };

  const std::vector<BadInput> table = {
      // Memory
      {"size 0", grpc::StatusCode::INVALID_ARGUMENT, "0 bytes",
       [&] { return me.Allocate(0, 0, nullptr); }},
      {"size above device memory", grpc::StatusCode::INVALID_ARGUMENT, "total capacity",
       [&] { return me.Allocate(0, (64u << 20) + 1, nullptr); }},
      {"size near 2^64", grpc::StatusCode::INVALID_ARGUMENT, "more than 1EB",
       [&] { return me.Allocate(0, ~uint64_t{0}, nullptr); }},
      {"device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 2",
       [&] { return me.Allocate(2, 512, nullptr); }},
      {"negative device", grpc::StatusCode::INVALID_ARGUMENT, "device -1",
       [&] { return me.Allocate(-1, 512, nullptr); }},
      {"unknown stream", grpc::StatusCode::NOT_FOUND, "stream 7 not found",
       [&] { return me.Allocate(0, 512, nullptr, false, 7); }},
      {"another session's stream", grpc::StatusCode::NOT_FOUND, "not a stream of this session",
       [&] { return me.Allocate(0, 512, nullptr, false, their_stream); }},
      {"a stream of another device", grpc::StatusCode::INVALID_ARGUMENT, "is on device 1",
       [&] { return me.Allocate(0, 512, nullptr, false, stream1); }},
      {"lease of 0 bytes", grpc::StatusCode::INVALID_ARGUMENT, "0 bytes",
       [&] { return lease(0, 0); }},
      {"lease not a segment size", grpc::StatusCode::INVALID_ARGUMENT, "multiple of 2 MiB",
       [&] { return lease(0, 4096); }},
      {"small-pool lease of 20 MiB", grpc::StatusCode::INVALID_ARGUMENT,
       "small-pool segments are 2 MiB", [&] { return lease(0, 20u << 20, 0, true); }},
      {"lease above device memory", grpc::StatusCode::INVALID_ARGUMENT, "total capacity",
       [&] { return lease(0, 66u << 20); }},
      {"lease near 2^64", grpc::StatusCode::INVALID_ARGUMENT, "more than 1EB",
       [&] { return lease(0, ~uint64_t{0}); }},
      {"lease on a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 2",
       [&] { return lease(2, 2u << 20); }},
      {"lease for an unknown stream", grpc::StatusCode::NOT_FOUND, "stream 7 not found",
       [&] { return lease(0, 2u << 20, 7); }},
      {"lease for another session's stream", grpc::StatusCode::NOT_FOUND,
       "not a stream of this session", [&] { return lease(0, 2u << 20, their_stream); }},
      {"lease returning a foreign id", grpc::StatusCode::NOT_FOUND, "not a live allocation",
       [&] {
         v1::LeaseRequest request;
         request.set_device(0);
         request.set_size(2u << 20);
         request.add_free_allocation_ids(theirs.allocation_id());
         v1::AllocateResponse response;
         return me.memory().Lease(me.Context().get(), request, &response);
       }},
      {"unknown id", grpc::StatusCode::NOT_FOUND, "allocation 999999 not found",
       [&] { return me.Free({999999}); }},
      {"freed id", grpc::StatusCode::NOT_FOUND, "not a live allocation",
       [&] { return me.Free({freed.allocation_id()}); }},
      {"foreign id", grpc::StatusCode::NOT_FOUND, "not a live allocation",
       [&] { return me.Free({theirs.allocation_id()}); }},
      {"id named twice", grpc::StatusCode::INVALID_ARGUMENT, "named twice",
       [&] {
         return me.Free({mine.allocation_id(), mine.allocation_id()});
       }},
      {"too many ids in one free", grpc::StatusCode::INVALID_ARGUMENT, "at most 65536",
       [&] {
         std::vector<uint64_t> ids(65537);
         for (size_t i = 0; i < ids.size(); ++i) ids[i] = i + 1;
         return me.Free(ids);
       }},
      {"short wait event handle", grpc::StatusCode::INVALID_ARGUMENT,
       "wait event handle of 3 bytes",
       [&] {
         v1::FreeRequest request;
         request.add_allocation_ids(mine.allocation_id());
         request.add_wait_event_handles("abc");
         v1::FreeResponse response;
         return me.memory().Free(me.Context().get(), request, &response);
       }},
      {"wait handle naming no event", grpc::StatusCode::INVALID_ARGUMENT, "nothing was freed",
       [&] {
         v1::FreeRequest request;
         request.add_allocation_ids(mine.allocation_id());
         request.add_wait_event_handles(good_handle);
         v1::FreeResponse response;
         return me.memory().Free(me.Context().get(), request, &response);
       }},
      {"malformed wait handle without frees", grpc::StatusCode::INVALID_ARGUMENT,
       "wait event handle of 1 bytes",
       [&] {
         v1::AllocateRequest request;
         request.set_device(0);
         request.set_size(512);
         request.add_free_wait_event_handles("x");
         v1::AllocateResponse response;
         return me.memory().Allocate(me.Context().get(), request, &response);
       }},
      {"record_stream of an unknown stream", grpc::StatusCode::NOT_FOUND, "stream 4242 not found",
       [&] {
         v1::RecordStreamRequest request;
         request.set_allocation_id(mine.allocation_id());
         request.set_stream(4242);
         v1::RecordStreamResponse response;
         return me.memory().RecordStream(me.Context().get(), request, &response);
       }},
      {"record_stream of a foreign allocation", grpc::StatusCode::NOT_FOUND,
       "not a live allocation",
       [&] {
         v1::RecordStreamRequest request;
         request.set_allocation_id(theirs.allocation_id());
         v1::RecordStreamResponse response;
         return me.memory().RecordStream(me.Context().get(), request, &response);
       }},
      {"share a foreign id", grpc::StatusCode::NOT_FOUND, "not a live allocation",
       [&] { return share(theirs.allocation_id()); }},
      {"share a non-shareable allocation", grpc::StatusCode::FAILED_PRECONDITION, "not shareable",
       [&] { return share(plain.allocation_id()); }},
      {"garbage share token", grpc::StatusCode::INVALID_ARGUMENT, "malformed share token",
       [&] { return import("not a token \x01"); }},
      {"empty share token", grpc::StatusCode::INVALID_ARGUMENT, "malformed share token",
       [&] { return import(""); }},
      {"unknown share token", grpc::StatusCode::NOT_FOUND, "never issued",
       [&] { return import("gpumux-share-00000000000000000000000000000000"); }},
      {"replayed share token", grpc::StatusCode::FAILED_PRECONDITION, "single-use",
       [&] { return import(token.token()); }},
      {"fraction above 1", grpc::StatusCode::INVALID_ARGUMENT, "Invalid fraction value: 1.5",
       [&] { return limit(1.5); }},
      {"negative fraction", grpc::StatusCode::INVALID_ARGUMENT, "Allowed range: 0~1",
       [&] { return limit(-0.1); }},
      {"no limit kind", grpc::StatusCode::INVALID_ARGUMENT, "one of fraction, bytes or unlimited",
       [&] {
         v1::SetMemoryLimitRequest request;
         v1::SetMemoryLimitResponse response;
         return me.memory().SetMemoryLimit(me.Context().get(), request, &response);
       }},
      {"zero byte limit", grpc::StatusCode::INVALID_ARGUMENT, "must be positive",
       [&] {
         v1::SetMemoryLimitRequest request;
         request.set_bytes(0);
         v1::SetMemoryLimitResponse response;
         return me.memory().SetMemoryLimit(me.Context().get(), request, &response);
       }},
      {"stats of a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 9",
       [&] {
         v1::GetStatsRequest request;
         request.set_device(9);
         v1::MemoryStats stats;
         return me.memory().GetStats(me.Context().get(), request, &stats);
       }},
      {"empty_cache of a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 3",
       [&] {
         v1::EmptyCacheRequest request;
         request.set_device(3);
         v1::EmptyCacheResponse response;
         return me.memory().EmptyCache(me.Context().get(), request, &response);
       }},
      {"empty_cache of every session from a session", grpc::StatusCode::PERMISSION_DENIED,
       "an operator's action",
       [&] {
         v1::EmptyCacheRequest request;
         request.set_all_devices(true);
         request.set_all_sessions(true);
         v1::EmptyCacheResponse response;
         return me.memory().EmptyCache(me.Context().get(), request, &response);
       }},
      {"Admin.EmptyCache of a device out of range", grpc::StatusCode::INVALID_ARGUMENT,
       "device 3",
       [&] {
         v1::AdminEmptyCacheRequest request;
         request.set_device(3);
         v1::AdminEmptyCacheResponse response;
         grpc::ClientContext context;
         return admin->EmptyCache(&context, request, &response);
       }},
      {"Admin.EmptyCache without a target", grpc::StatusCode::INVALID_ARGUMENT,
       "name a device, or all_devices: true",
       [&] {
         v1::AdminEmptyCacheResponse response;
         grpc::ClientContext context;
         return admin->EmptyCache(&context, v1::AdminEmptyCacheRequest(), &response);
       }},
      {"Admin.EmptyCache on the main socket", grpc::StatusCode::PERMISSION_DENIED,
       "connect to the admin socket",
       [&] {
         v1::AdminEmptyCacheRequest request;
         request.set_all_devices(true);
         v1::AdminEmptyCacheResponse response;
         grpc::ClientContext context;
         return main_socket_admin->EmptyCache(&context, request, &response);
       }},
      {"quota overrun", grpc::StatusCode::RESOURCE_EXHAUSTED, "CUDA out of memory",
       [&] {
         if (grpc::Status s = limit(0.25); !s.ok()) return s;  // 16 MiB
         return me.Allocate(0, 30 << 20, nullptr);
       }},
      {"device out of memory", grpc::StatusCode::RESOURCE_EXHAUSTED, "CUDA out of memory",
       [&] {
         v1::Allocation big;
         if (grpc::Status s = other.Allocate(0, 40 << 20, &big); !s.ok()) return s;
         grpc::Status s = other.Allocate(0, 40 << 20, nullptr);
         other.Free({big.allocation_id()});
         return s;
       }},
      // Session and credentials
      {"no session metadata", grpc::StatusCode::UNAUTHENTICATED, "missing gpumux-session",
       [&] { return with_metadata(""); }},
      {"malformed session metadata", grpc::StatusCode::UNAUTHENTICATED, "malformed gpumux-session",
       [&] { return with_metadata("nonsense"); }},
      {"wrong secret", grpc::StatusCode::UNAUTHENTICATED, "secret does not match",
       [&] {
         return with_metadata(std::to_string(me.id()) + ":00000000000000000000000000000000");
       }},
      // gRPC's default limit on a call's metadata is 8 KiB; past it the
      // connection dropped, and with it every session of the process on it.
      {"8 KiB session metadata", grpc::StatusCode::UNAUTHENTICATED,
       "gpumux-session metadata is 8192 bytes",
       [&] { return with_metadata(std::string(8192, '7')); }},
      {"control character in the client name", grpc::StatusCode::INVALID_ARGUMENT,
       "control character U+001B", [&] { return open_with("evil\x1b[31m"); }},
      {"bidirectional override in the client name", grpc::StatusCode::INVALID_ARGUMENT,
       "control character U+202E", [&] { return open_with("trainer\xe2\x80\xae"
                                                                "0-dop"); }},
      {"a negative pid", grpc::StatusCode::INVALID_ARGUMENT, "pid -1 is no process id",
       [&] { return open_with("ok", -1); }},
      {"a pid over Linux's limit", grpc::StatusCode::INVALID_ARGUMENT,
       "pid 4194305 is no process id", [&] { return open_with("ok", (1 << 22) + 1); }},
      {"a 1 MiB profile token", grpc::StatusCode::INVALID_ARGUMENT,
       "the profile token is 1048576 bytes; at most 256",
       [&] { return open_with("ok", 1, std::string(1 << 20, 't')); }},
      {"client name over 256 bytes", grpc::StatusCode::INVALID_ARGUMENT, "at most 256",
       [&] { return open_with(std::string(300, 'n')); }},
      {"an answer before `open`", grpc::StatusCode::INVALID_ARGUMENT,
       "the first message on a session stream must be `open`",
       [&] { return stream_of({answer_message}); }},
      {"a second `open`", grpc::StatusCode::FAILED_PRECONDITION,
       "the stream takes only answers to the daemon's questions",
       [&] {
         return stream_of({open_message, answer_message, open_message});
       }},
      // Device and Observe
      {"properties of a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 5",
       [&] {
         v1::GetDevicePropertiesRequest request;
         request.set_device(5);
         v1::DeviceProperties properties;
         grpc::ClientContext context;
         return device->GetDeviceProperties(&context, request, &properties);
       }},
      {"synchronize a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device -3",
       [&] {
         v1::SynchronizeRequest request;
         request.set_device(-3);
         v1::SynchronizeResponse response;
         grpc::ClientContext context;
         return device->Synchronize(&context, request, &response);
       }},
      {"observe an unknown session", grpc::StatusCode::NOT_FOUND, "session 424242 not found",
       [&] {
         v1::ObserveStatsRequest request;
         request.set_session_id(424242);
         v1::MemoryStats stats;
         grpc::ClientContext context;
         return observe->GetMemoryStats(&context, request, &stats);
       }},
      {"observe a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 7",
       [&] {
         v1::ObserveStatsRequest request;
         request.set_device(7);
         v1::MemoryStats stats;
         grpc::ClientContext context;
         return observe->GetMemoryStats(&context, request, &stats);
       }},
      // Stream
      {"create a stream on a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 4",
       [&] { return CreateStream(me, 4, 0, nullptr); }},
      {"destroy the default stream", grpc::StatusCode::INVALID_ARGUMENT, "default stream",
       [&] { return DestroyStream(me, 0, 0); }},
      {"destroy another session's stream", grpc::StatusCode::NOT_FOUND,
       "not a stream of this session", [&] { return DestroyStream(me, 0, their_stream); }},
      {"query a stream on the wrong device", grpc::StatusCode::INVALID_ARGUMENT,
       "is on device 1, not device 0", [&] { return QueryStream(me, 0, stream1, nullptr); }},
      {"synchronize an unknown stream", grpc::StatusCode::NOT_FOUND, "stream 31337 not found",
       [&] { return SynchronizeStream(me, 1, 31337); }},
      {"wait on another session's event", grpc::StatusCode::NOT_FOUND,
       "not an event of this session", [&] { return WaitEvent(me, 0, 0, their_event); }},
      {"wait_stream on an unknown stream", grpc::StatusCode::NOT_FOUND, "stream 555 not found",
       [&] { return WaitStream(me, Ref(0, 0), Ref(0, 555)); }},
      // Event
      {"interprocess event that times", grpc::StatusCode::INVALID_ARGUMENT, "cannot time",
       [&] { return CreateEvent(me, 0, {.enable_timing = true, .interprocess = true}, nullptr); }},
      {"event on a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 8",
       [&] { return CreateEvent(me, 8, {}, nullptr); }},
      {"record on another device's stream", grpc::StatusCode::INVALID_ARGUMENT,
       "Event device 0 does not match recording stream's device 1",
       [&] { return RecordEvent(me, event0, 1, stream1); }},
      {"query another session's event", grpc::StatusCode::NOT_FOUND, "not an event of this session",
       [&] { return QueryEvent(me, their_event, nullptr); }},
      {"elapsed time without timing", grpc::StatusCode::FAILED_PRECONDITION, "enable_timing=True",
       [&] { return ElapsedTime(me, event0, timing0, nullptr); }},
      {"elapsed time across devices", grpc::StatusCode::INVALID_ARGUMENT, "both on one device",
       [&] { return ElapsedTime(me, timing0, timing1, nullptr); }},
      {"elapsed time of unrecorded events", grpc::StatusCode::FAILED_PRECONDITION,
       "must be recorded", [&] { return ElapsedTime(me, timing0, timing0, nullptr); }},
      {"ipc handle of a plain event", grpc::StatusCode::FAILED_PRECONDITION, "interprocess=true",
       [&] { return GetIpcHandle(me, event0, nullptr); }},
      {"open a handle of the wrong size", grpc::StatusCode::INVALID_ARGUMENT, "size 64, but got 5",
       [&] { return OpenIpcHandle(me, 0, "hello", nullptr); }},
      {"open a handle naming no event", grpc::StatusCode::INVALID_ARGUMENT,
       "not a host-backend event handle",
       [&] { return OpenIpcHandle(me, 0, good_handle, nullptr); }},
      {"destroy an unknown event", grpc::StatusCode::NOT_FOUND, "event 777777 not found",
       [&] { return DestroyEvent(me, 777777); }},
      // Copy
      {"memset past the allocation", grpc::StatusCode::OUT_OF_RANGE, "outside allocation",
       [&] { return memset(mine.allocation_id(), 4000, 200, 0); }},
      {"memset with an offset near 2^64", grpc::StatusCode::OUT_OF_RANGE, "outside allocation",
       [&] { return memset(mine.allocation_id(), ~uint64_t{0}, 2, 0); }},
      {"memset value above a byte", grpc::StatusCode::INVALID_ARGUMENT, "256 is not a byte",
       [&] { return memset(mine.allocation_id(), 0, 16, 256); }},
      {"memset of a foreign allocation", grpc::StatusCode::NOT_FOUND, "not a live allocation",
       [&] { return memset(theirs.allocation_id(), 0, 16, 1); }},
      {"memset on an unknown stream", grpc::StatusCode::NOT_FOUND, "stream 9999 not found",
       [&] { return memset(mine.allocation_id(), 0, 16, 1, 9999); }},
      {"upload past the allocation", grpc::StatusCode::OUT_OF_RANGE, "outside allocation",
       [&] { return upload(mine.allocation_id(), 4090, std::string(100, 'x')); }},
      {"download past the allocation", grpc::StatusCode::OUT_OF_RANGE, "outside allocation",
       [&] { return download(mine.allocation_id(), 0, 5000); }},
      {"copy without a source", grpc::StatusCode::INVALID_ARGUMENT, "set the source",
       [&] {
         v1::HostToDeviceRequest request;
         *request.mutable_dst() = range(mine.allocation_id(), 0);
         v1::CopyResponse response;
         return me.copy().HostToDevice(me.Context().get(), request, &response);
       }},
      {"staged copy without a staging buffer", grpc::StatusCode::FAILED_PRECONDITION,
       "staging buffer",
       [&] {
         v1::HostToDeviceRequest request;
         *request.mutable_dst() = range(mine.allocation_id(), 0);
         request.mutable_staging()->set_size(16);
         v1::CopyResponse response;
         return me.copy().HostToDevice(me.Context().get(), request, &response);
       }},
      {"device to device from a foreign allocation", grpc::StatusCode::NOT_FOUND,
       "not a live allocation",
       [&] {
         v1::DeviceToDeviceRequest request;
         *request.mutable_dst() = range(mine.allocation_id(), 0);
         *request.mutable_src() = range(theirs.allocation_id(), 0);
         request.set_size(16);
         v1::CopyResponse response;
         return me.copy().DeviceToDevice(me.Context().get(), request, &response);
       }},
      // Comm
      {"broadcast with neither devices nor out", grpc::StatusCode::INVALID_ARGUMENT,
       "Exactly one of 'devices' and 'out' must be specified, but got devices=None and out=None",
       [&] { return broadcast(tensor(mine.allocation_id(), {4}), {}, false); }},
      {"broadcast of a foreign allocation", grpc::StatusCode::NOT_FOUND, "not a live allocation",
       [&] { return broadcast(tensor(theirs.allocation_id(), {4}), {1}); }},
      {"broadcast of a tensor past its allocation", grpc::StatusCode::OUT_OF_RANGE,
       "does not fit allocation",
       [&] { return broadcast(tensor(mine.allocation_id(), {1025}), {1}); }},
      {"broadcast at an offset near 2^64", grpc::StatusCode::OUT_OF_RANGE,
       "does not fit allocation",
       [&] { return broadcast(tensor(mine.allocation_id(), {2}, ~uint64_t{0}), {1}); }},
      {"broadcast without a dtype", grpc::StatusCode::INVALID_ARGUMENT, "dtype 0 is not one of",
       [&] { return broadcast(tensor(mine.allocation_id(), {4}, 0, v1::DTYPE_UNSPECIFIED), {1}); }},
      {"a negative dimension", grpc::StatusCode::INVALID_ARGUMENT, "negative dimension -3: [2, -3]",
       [&] {
         return broadcast(tensor(mine.allocation_id(), {2, -3}), {1});
       }},
      {"a tensor of 65 dimensions", grpc::StatusCode::INVALID_ARGUMENT, "at most 64 dimensions",
       [&] { return broadcast(tensor(mine.allocation_id(), std::vector<int64_t>(65, 1)), {1}); }},
      {"a shape over 2^62 bytes", grpc::StatusCode::INVALID_ARGUMENT, "more than 2^62 bytes",
       [&] {
         return broadcast(tensor(mine.allocation_id(), {int64_t{1} << 40, int64_t{1} << 40}), {1});
       }},
      {"broadcast to a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 9",
       [&] { return broadcast(tensor(mine.allocation_id(), {4}), {9}); }},
      {"broadcast to device 2^32, which is 0 in 32 bits", grpc::StatusCode::INVALID_ARGUMENT,
       "device 4294967296 is out of range",
       [&] { return broadcast(tensor(mine.allocation_id(), {4}), {int64_t{1} << 32}); }},
      {"broadcast to a negative device", grpc::StatusCode::INVALID_ARGUMENT,
       "Expected non-negative device index, but got -1",
       [&] { return broadcast(tensor(mine.allocation_id(), {4}), {-1}); }},
      {"broadcast on another session's stream", grpc::StatusCode::NOT_FOUND, "not found",
       [&] { return broadcast(tensor(mine.allocation_id(), {4}), {1}, true, their_stream); }},
      {"broadcast to an empty device list", grpc::StatusCode::INVALID_ARGUMENT,
       "broadcast needs at least one device in 'devices'",
       [&] { return broadcast(tensor(mine.allocation_id(), {4}), {}); }},
      {"broadcast with a stream for device 99", grpc::StatusCode::INVALID_ARGUMENT, "device 99",
       [&] {
         v1::BroadcastRequest request;
         *request.mutable_tensor() = tensor(mine.allocation_id(), {4});
         request.mutable_devices()->add_devices(1);
         (*request.mutable_options()->mutable_streams())[99] = 1;
         v1::CommResponse response;
         return me.comm().Broadcast(me.Context().get(), request, &response);
       }},
      {"a tensor naming another device than its memory's", grpc::StatusCode::INVALID_ARGUMENT,
       "is on its memory's device 0, not on the device 1 it names",
       [&] {
         v1::Tensor named = tensor(mine.allocation_id(), {4});
         named.set_device(1);
         return broadcast(named, {1});
       }},
      {"broadcast_coalesced without devices", grpc::StatusCode::INVALID_ARGUMENT,
       "at least one device",
       [&] {
         v1::BroadcastCoalescedRequest request;
         *request.add_tensors() = tensor(mine.allocation_id(), {4});
         v1::CommResponse response;
         return me.comm().BroadcastCoalesced(me.Context().get(), request, &response);
       }},
      {"reduce_add without inputs", grpc::StatusCode::INVALID_ARGUMENT, "at least one input",
       [&] {
         v1::ReduceAddRequest request;
         v1::CommResponse response;
         return me.comm().ReduceAdd(me.Context().get(), request, &response);
       }},
      {"reduce_add_coalesced with lists of two lengths", grpc::StatusCode::INVALID_ARGUMENT,
       "as many tensors on every GPU",
       [&] {
         v1::ReduceAddCoalescedRequest request;
         *request.add_inputs()->add_tensors() = tensor(mine.allocation_id(), {4});
         request.add_inputs();
         v1::CommResponse response;
         return me.comm().ReduceAddCoalesced(me.Context().get(), request, &response);
       }},
      {"scatter of a 0-d tensor", grpc::StatusCode::INVALID_ARGUMENT,
       "chunk expects at least a 1-dimensional tensor",
       [&] {
         v1::ScatterRequest request;
         *request.mutable_tensor() = tensor(mine.allocation_id(), {});
         request.mutable_devices()->add_devices(0);
         v1::CommResponse response;
         return me.comm().Scatter(me.Context().get(), request, &response);
       }},
      {"scatter with a chunk size of 0", grpc::StatusCode::INVALID_ARGUMENT,
       "Chunk size must be positive",
       [&] {
         v1::ScatterRequest request;
         *request.mutable_tensor() = tensor(mine.allocation_id(), {4});
         request.mutable_devices()->add_devices(0);
         request.mutable_devices()->add_devices(1);
         request.mutable_chunk_sizes()->add_sizes(4);
         request.mutable_chunk_sizes()->add_sizes(0);
         v1::CommResponse response;
         return me.comm().Scatter(me.Context().get(), request, &response);
       }},
      {"gather without a destination", grpc::StatusCode::INVALID_ARGUMENT, "set the destination",
       [&] { return gather([](v1::GatherRequest&) {}); }},
      {"gather with host_inline false", grpc::StatusCode::INVALID_ARGUMENT,
       "host_inline is set to false",
       [&] { return gather([](v1::GatherRequest& r) { r.set_host_inline(false); }); }},
      {"gather to a staging buffer the session lacks", grpc::StatusCode::FAILED_PRECONDITION,
       "staging buffer",
       [&] { return gather([](v1::GatherRequest& r) { r.set_host_staging_offset(0); }); }},
      {"gather to a device beyond int32", grpc::StatusCode::INVALID_ARGUMENT, "no device",
       [&] { return gather([](v1::GatherRequest& r) { r.set_device(int64_t{1} << 40); }); }},
      {"all_reduce without an op", grpc::StatusCode::INVALID_ARGUMENT, "reduce op 0 is not one of",
       [&] {
         v1::AllReduceRequest request;
         *request.add_inputs() = tensor(mine.allocation_id(), {4});
         v1::CommResponse response;
         return me.comm().AllReduce(me.Context().get(), request, &response);
       }},
      {"all_reduce of 4097 tensors", grpc::StatusCode::INVALID_ARGUMENT, "at most 4096 tensors",
       [&] {
         v1::AllReduceRequest request;
         for (int i = 0; i < 4097; ++i) *request.add_inputs() = tensor(mine.allocation_id(), {1});
         request.set_op(v1::REDUCE_OP_SUM);
         v1::CommResponse response;
         return me.comm().AllReduce(me.Context().get(), request, &response);
       }},
      // Group
      {"form a group with a space in its name", grpc::StatusCode::INVALID_ARGUMENT,
       "may hold only [A-Za-z0-9._-]", [&] { return form("a b", 1, 0); }},
      {"form a group of 129-character name", grpc::StatusCode::INVALID_ARGUMENT,
       "1 to 128 characters, not 129", [&] { return form(std::string(129, 'g'), 1, 0); }},
      {"form a group of world size 0", grpc::StatusCode::INVALID_ARGUMENT,
       "world size is 1 to 1024, not 0", [&] { return form("g", 0, 0); }},
      {"form a group of world size 1025", grpc::StatusCode::INVALID_ARGUMENT,
       "world size is 1 to 1024, not 1025", [&] { return form("g", 1025, 0); }},
      {"form a group as rank 2 of 2", grpc::StatusCode::INVALID_ARGUMENT,
       "rank 2 is out of range for world size 2", [&] { return form("g", 2, 2); }},
      {"form a group as rank -1", grpc::StatusCode::INVALID_ARGUMENT,
       "rank -1 is out of range", [&] { return form("g", 2, -1); }},
      {"form a group with a negative timeout", grpc::StatusCode::INVALID_ARGUMENT,
       "a group timeout is 0", [&] { return form("g", 1, 0, "", -1); }},
      {"form a group with a timeout over an hour", grpc::StatusCode::INVALID_ARGUMENT,
       "a group timeout is 0", [&] { return form("g", 1, 0, "", 3600001); }},
      {"form a group on device 2 of a daemon with two", grpc::StatusCode::INVALID_ARGUMENT,
       "device 2 is out of range: this daemon has 2 devices (0..1)",
       [&] { return form("g", 1, 0, "", 0, 2); }},
      {"form a group on device -1", grpc::StatusCode::INVALID_ARGUMENT,
       "device -1 is out of range", [&] { return form("g", 1, 0, "", 0, -1); }},
      {"form a group as rank 1 without a rendezvous", grpc::StatusCode::INVALID_ARGUMENT,
       "needs the rendezvous address", [&] { return form("g", 2, 1); }},
      {"lead a group of two without the full TCP listener", grpc::StatusCode::FAILED_PRECONDITION,
       "--tcp-mode=full", [&] { return form("g", 2, 0); }},
      {"join a group without TLS and the group's token", grpc::StatusCode::FAILED_PRECONDITION,
       "needs TLS and the group's token", [&] { return form("g", 2, 1, "127.0.0.1:1"); }},
      {"destroy a group this daemon is not in", grpc::StatusCode::NOT_FOUND,
       "no group \"nope\"",
       [&] {
         v1::DestroyGroupRequest request;
         request.set_name("nope");
         v1::DestroyGroupResponse response;
         return groups->DestroyGroup(me.Context().get(), request, &response);
       }},
      {"group all_reduce on a group this daemon is not in", grpc::StatusCode::NOT_FOUND,
       "no group \"nope\"",
       [&] { return group_all_reduce("nope", tensor(mine.allocation_id(), {4}), v1::REDUCE_OP_SUM); }},
      {"group all_reduce without an op", grpc::StatusCode::INVALID_ARGUMENT,
       "reduce op 0 is not one of",
       [&] {
         return group_all_reduce("solo", tensor(mine.allocation_id(), {4}),
                                 v1::REDUCE_OP_UNSPECIFIED);
       }},
      {"group all_reduce of a foreign allocation", grpc::StatusCode::NOT_FOUND,
       "not a live allocation",
       [&] { return group_all_reduce("solo", tensor(theirs.allocation_id(), {4}), v1::REDUCE_OP_SUM); }},
      {"group all_reduce past the allocation", grpc::StatusCode::OUT_OF_RANGE,
       "does not fit allocation",
       [&] { return group_all_reduce("solo", tensor(mine.allocation_id(), {2000}), v1::REDUCE_OP_SUM); }},
      {"group all_reduce of a negative dimension", grpc::StatusCode::INVALID_ARGUMENT,
       "negative dimension -4",
       [&] { return group_all_reduce("solo", tensor(mine.allocation_id(), {-4}), v1::REDUCE_OP_SUM); }},
      {"group all_reduce on another session's stream", grpc::StatusCode::NOT_FOUND, "stream",
       [&] {
         v1::GroupAllReduceRequest request;
         request.set_group("solo");
         *request.mutable_tensor() = tensor(mine.allocation_id(), {4});
         request.set_op(v1::REDUCE_OP_SUM);
         (*request.mutable_options()->mutable_streams())[0] = their_stream;
         v1::CommResponse response;
         return groups->AllReduce(me.Context().get(), request, &response);
       }},
      {"group broadcast from a root outside the group", grpc::StatusCode::INVALID_ARGUMENT,
       "root rank 1 is out of range for world size 1",
       [&] {
         v1::GroupBroadcastRequest request;
         request.set_group("solo");
         *request.mutable_tensor() = tensor(mine.allocation_id(), {4});
         request.set_root(1);
         v1::CommResponse response;
         return groups->Broadcast(me.Context().get(), request, &response);
       }},
      {"group all_reduce both waited and async_op", grpc::StatusCode::INVALID_ARGUMENT,
       "cannot both wait and be async_op",
       [&] {
         v1::GroupAllReduceRequest request;
         request.set_group("solo");
         *request.mutable_tensor() = tensor(mine.allocation_id(), {4});
         request.set_op(v1::REDUCE_OP_SUM);
         request.mutable_options()->set_wait(true);
         request.mutable_options()->set_async_op(true);
         v1::CommResponse response;
         return groups->AllReduce(me.Context().get(), request, &response);
       }},
      {"async_op group broadcast from a root outside the group", grpc::StatusCode::INVALID_ARGUMENT,
       "root rank -1 is out of range for world size 1",
       [&] {
         v1::GroupBroadcastRequest request;
         request.set_group("solo");
         *request.mutable_tensor() = tensor(mine.allocation_id(), {4});
         request.set_root(-1);
         request.mutable_options()->set_async_op(true);
         v1::CommResponse response;
         return groups->Broadcast(me.Context().get(), request, &response);
       }},
      {"async_op group all_reduce on a group this daemon is not in", grpc::StatusCode::NOT_FOUND,
       "no group \"nope\"",
       [&] {
         v1::GroupAllReduceRequest request;
         request.set_group("nope");
         *request.mutable_tensor() = tensor(mine.allocation_id(), {4});
         request.set_op(v1::REDUCE_OP_SUM);
         request.mutable_options()->set_async_op(true);
         v1::CommResponse response;
         return groups->AllReduce(me.Context().get(), request, &response);
       }},
      {"group all_gather into another dtype", grpc::StatusCode::INVALID_ARGUMENT,
       "output tensor must have the same type as input tensor",
       [&] {
         v1::GroupAllGatherRequest request;
         request.set_group("solo");
         *request.mutable_input() = tensor(mine.allocation_id(), {4});
         *request.mutable_output() = tensor(mine.allocation_id(), {4}, 0, v1::DTYPE_INT32);
         v1::CommResponse response;
         return groups->AllGather(me.Context().get(), request, &response);
       }},
      {"group all_gather across devices", grpc::StatusCode::INVALID_ARGUMENT,
       "must be on the same device",
       [&] {
         v1::GroupAllGatherRequest request;
         request.set_group("solo");
         *request.mutable_input() = tensor(mine.allocation_id(), {4});
         *request.mutable_output() = tensor(plain.allocation_id(), {4});
         v1::CommResponse response;
         return groups->AllGather(me.Context().get(), request, &response);
       }},
      {"group reduce_scatter of unequal sizes", grpc::StatusCode::INVALID_ARGUMENT,
       "input tensor must be the same size as output size times world size",
       [&] {
         v1::GroupReduceScatterRequest request;
         request.set_group("solo");
         *request.mutable_input() = tensor(mine.allocation_id(), {8});
         *request.mutable_output() = tensor(mine.allocation_id(), {4});
         request.set_op(v1::REDUCE_OP_MAX);
         v1::CommResponse response;
         return groups->ReduceScatter(me.Context().get(), request, &response);
       }},
      {"group reduce_scatter with op 9", grpc::StatusCode::INVALID_ARGUMENT,
       "reduce op 9 is not one of",
       [&] {
         v1::GroupReduceScatterRequest request;
         request.set_group("solo");
         *request.mutable_input() = tensor(mine.allocation_id(), {4});
         *request.mutable_output() = tensor(mine.allocation_id(), {4});
         request.set_op(static_cast<v1::ReduceOp>(9));
         v1::CommResponse response;
         return groups->ReduceScatter(me.Context().get(), request, &response);
       }},
      {"group collective without a session", grpc::StatusCode::UNAUTHENTICATED, "session",
       [&] {
         v1::GroupAllReduceRequest request;
         request.set_group("solo");
         grpc::ClientContext context;
         v1::CommResponse response;
         return groups->AllReduce(&context, request, &response);
       }},
      // Random
      {"fill past the allocation", grpc::StatusCode::OUT_OF_RANGE, "outside allocation",
       [&] { return generate(mine.allocation_id(), v1::DTYPE_FLOAT32, 2000, 0, 1); }},
      {"uniform with low above high", grpc::StatusCode::INVALID_ARGUMENT, "low < high",
       [&] { return generate(mine.allocation_id(), v1::DTYPE_FLOAT32, 4, 2, 1); }},
      {"no dtype", grpc::StatusCode::INVALID_ARGUMENT, "dtype 0 is not one of",
       [&] { return generate(mine.allocation_id(), v1::DTYPE_UNSPECIFIED, 4, 0, 1); }},
      {"RNG state of the wrong size", grpc::StatusCode::INVALID_ARGUMENT, "RNG state is wrong size",
       [&] { return set_rng_state("short"); }},
      {"RNG offset not a multiple of 4", grpc::StatusCode::INVALID_ARGUMENT,
       "offset must be a multiple of 4",
       [&] { return set_rng_state(std::string("\x01\0\0\0\0\0\0\0\x03\0\0\0\0\0\0\0", 16)); }},
      {"RNG offset that would wrap", grpc::StatusCode::FAILED_PRECONDITION,
       "without wrapping past 2^64",
       [&] {
         if (grpc::Status s = set_rng_state(
                 std::string("\x01\0\0\0\0\0\0\0\xfc\xff\xff\xff\xff\xff\xff\xff", 16));
             !s.ok()) {
           return s;
         }
         return generate(mine.allocation_id(), v1::DTYPE_FLOAT32, 16, 0, 1);
       }},
      {"seed of a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 6",
       [&] {
         v1::ManualSeedRequest request;
         request.set_device(6);
         v1::ManualSeedResponse response;
         return me.random().ManualSeed(me.Context().get(), request, &response);
       }},
      // Calls of no service the socket has: where, or what, instead of a bare
      // UNIMPLEMENTED.
      {"a Rendezvous call on the Unix socket", grpc::StatusCode::FAILED_PRECONDITION,
       "gpumux.v1.Rendezvous is not served on the Unix socket: it is served on the TCP listener "
       "in its full mode",
       [&] {
         auto rendezvous = v1::Rendezvous::NewStub(channel);
         grpc::ClientContext context;
         v1::RendezvousJoinResponse response;
         return rendezvous->Join(&context, v1::RendezvousJoinRequest(), &response);
       }},
      {"an unknown service", grpc::StatusCode::UNIMPLEMENTED,
       "gpumuxd has no method '/gpumux.v1.NoSuch/Method' on the Unix socket, which serves "
       "gpumux.v1.Session, gpumux.v1.Device",
       [&] { return call_by_name(channel, "/gpumux.v1.NoSuch/Method"); }},
      {"an unknown method of a served service", grpc::StatusCode::UNIMPLEMENTED,
       "gpumuxd has no method '/gpumux.v1.Memory/Steal'",
       [&] { return call_by_name(channel, "/gpumux.v1.Memory/Steal"); }},
      {"Memory on the admin socket", grpc::StatusCode::FAILED_PRECONDITION,
       "gpumux.v1.Memory is not served on the admin socket: it is served on the daemon's main "
       "Unix socket",
       [&] { return call_by_name(admin_channel, "/gpumux.v1.Memory/Allocate"); }},
      // NVTX
      {"NVTX mark holding a NUL", grpc::StatusCode::INVALID_ARGUMENT,
       "NVTX message holds control character U+0000 at byte 4",
       [&] {
         v1::NvtxMessage message;
         message.set_message(std::string("step\0forged", 11));
         v1::NvtxMarkResponse response;
         return me.nvtx().Mark(me.Context().get(), message, &response);
       }},
      {"NVTX range with an ANSI escape", grpc::StatusCode::INVALID_ARGUMENT,
       "control character U+001B",
       [&] {
         v1::NvtxMessage message;
         message.set_message("fwd\x1b[2J");
         v1::NvtxDepth depth;
         return me.nvtx().RangePush(me.Context().get(), message, &depth);
       }},
      {"range_pop with no range open", grpc::StatusCode::FAILED_PRECONDITION,
       "no NVTX range is open",
       [&] {
         v1::NvtxDepth depth;
         return me.nvtx().RangePop(me.Context().get(), v1::NvtxRangePopRequest(), &depth);
       }},
      // Profile and Admin.ProfileSession
      {"profile with a capacity above 2^24", grpc::StatusCode::INVALID_ARGUMENT,
       "a profile keeps at most 16777216 records, not 16777217",
       [&] { return start_profile(16777217, me); }},
      {"a 65th open profile of one session", grpc::StatusCode::RESOURCE_EXHAUSTED,
       "has 64 profiles open, the most one session may",
       [&] {
         std::vector<uint64_t> opened;
         grpc::Status status;
         for (int i = 0; i < 65 && status.ok(); ++i) {
           v1::StartProfileResponse response;
           status = profiles->Start(stranger.Context().get(), v1::StartProfileRequest(), &response);
           if (status.ok()) opened.push_back(response.profile_id());
         }
         for (uint64_t id : opened) EXPECT_TRUE(finish_profile(id, stranger).ok());
         return status;
       }},
      {"finish of a profile never started", grpc::StatusCode::NOT_FOUND, "has no open profile 999",
       [&] { return finish_profile(999, me); }},
      {"finish of another session's profile", grpc::StatusCode::NOT_FOUND,
       absl::StrCat("has no open profile ", others_profile.profile_id()),
       [&] { return finish_profile(others_profile.profile_id(), me); }},
      {"profile without a session", grpc::StatusCode::UNAUTHENTICATED, "session",
       [&] {
         grpc::ClientContext context;
         v1::StartProfileResponse response;
         return profiles->Start(&context, v1::StartProfileRequest(), &response);
       }},
      {"profile of session 0", grpc::StatusCode::INVALID_ARGUMENT, "session_id 0 names no session",
       [&] { return profile_session(0, 100); }},
      {"profile of a session that is not open", grpc::StatusCode::NOT_FOUND,
       "no session 999999 is open", [&] { return profile_session(999999, 100); }},
      {"profile for 0 ms", grpc::StatusCode::INVALID_ARGUMENT, "a profile lasts 1 ms to 1 hour",
       [&] { return profile_session(me.id(), 0); }},
      {"profile for a negative duration", grpc::StatusCode::INVALID_ARGUMENT,
       "a profile lasts 1 ms to 1 hour", [&] { return profile_session(me.id(), -5); }},
      {"profile for two hours", grpc::StatusCode::INVALID_ARGUMENT,
       "a profile lasts 1 ms to 1 hour, not 2h", [&] { return profile_session(me.id(), 7200000); }},
      {"live profile with a capacity above 2^24", grpc::StatusCode::INVALID_ARGUMENT,
       "at most 16777216 records", [&] { return profile_session(me.id(), 100, 1 << 25); }},
      {"profile of another tenant's session", grpc::StatusCode::PERMISSION_DENIED,
       "belongs to tenant 'pod-b'", [&] { return profile_session(stranger.id(), 100); }},
      {"admin profile of session 0", grpc::StatusCode::INVALID_ARGUMENT, "session_id 0",
       [&] { return profile_session(0, 100, 0, admin.get()); }},
      {"admin profile of a session that is not open", grpc::StatusCode::NOT_FOUND,
       "no session 999999 is open", [&] { return profile_session(999999, 100, 0, admin.get()); }},
      {"admin profile for 0 ms", grpc::StatusCode::INVALID_ARGUMENT, "1 ms to 1 hour",
       [&] { return profile_session(stranger.id(), 0, 0, admin.get()); }},
      {"admin profile on the main socket", grpc::StatusCode::PERMISSION_DENIED,
       "connect to the admin socket",
       [&] { return profile_session(stranger.id(), 100, 0, main_socket_admin.get()); }},
      {"tenant limit for an empty tenant", grpc::StatusCode::INVALID_ARGUMENT,
       "the tenant must not be empty", [&] { return tenant_limit("", 0, 4096); }},
      {"tenant limit for a tenant with a control character", grpc::StatusCode::INVALID_ARGUMENT,
       "control character U+001B", [&] { return tenant_limit("pod\x1b[31m", 0, 4096); }},
      {"tenant limit for a tenant over 256 bytes", grpc::StatusCode::INVALID_ARGUMENT,
       "at most 256", [&] { return tenant_limit(std::string(257, 't'), 0, 4096); }},
      {"tenant limit on a device out of range", grpc::StatusCode::INVALID_ARGUMENT, "device 2",
       [&] { return tenant_limit("pod", 2, 4096); }},
      {"tenant limit on a negative device", grpc::StatusCode::INVALID_ARGUMENT, "device -1",
       [&] { return tenant_limit("pod", kNegative, 4096); }},
      {"tenant limit without a device", grpc::StatusCode::INVALID_ARGUMENT, "no target",
       [&] { return tenant_limit("pod", kUnset, 4096); }},
      {"tenant limit with all_devices false", grpc::StatusCode::INVALID_ARGUMENT,
       "all_devices is false", [&] { return tenant_limit("pod", kFalse, 4096); }},
      {"tenant limit without a limit", grpc::StatusCode::INVALID_ARGUMENT, "no limit",
       [&] { return tenant_limit("pod", 0, kUnset); }},
      {"tenant limit of 0 bytes", grpc::StatusCode::INVALID_ARGUMENT,
       "a byte limit must be positive", [&] { return tenant_limit("pod", 0, 0); }},
      {"tenant limit with unlimited false", grpc::StatusCode::INVALID_ARGUMENT,
       "unlimited is false", [&] { return tenant_limit("pod", 0, kFalse); }},
      {"Admin on the main socket", grpc::StatusCode::PERMISSION_DENIED,
       "connect to the admin socket",
       [&] { return tenant_limit("pod", 0, 4096, main_socket_admin.get()); }},
      {"Admin tenants list on the main socket", grpc::StatusCode::PERMISSION_DENIED,
       "connect to the admin socket",
       [&] {
         grpc::ClientContext context;
         v1::ListTenantsResponse response;
         return main_socket_admin->ListTenants(&context, v1::ListTenantsRequest(), &response);
       }},
      {"kill of session 0", grpc::StatusCode::INVALID_ARGUMENT, "session_id is 0",
       [&] { return kill(0, "drain"); }},
      {"kill of a session that is not open", grpc::StatusCode::NOT_FOUND,
       "no session 999999 is open", [&] { return kill(999999, "drain"); }},
      {"kill with a reason over 1024 bytes", grpc::StatusCode::INVALID_ARGUMENT,
       "the reason is 1025 bytes; at most 1024",
       [&] { return kill(me.id(), std::string(1025, 'r')); }},
      {"kill with a newline in the reason", grpc::StatusCode::INVALID_ARGUMENT,
       "control character U+000A at byte 5", [&] { return kill(me.id(), "drain\nforged"); }},
      {"kill with a C1 control in the reason", grpc::StatusCode::INVALID_ARGUMENT,
       "control character U+009B",
       [&] {
         return kill(me.id(),
                     "x\xc2\x9b"
                     "31m");
       }},
      {"kill on the main socket", grpc::StatusCode::PERMISSION_DENIED,
       "connect to the admin socket",
       [&] { return kill(me.id(), "drain", main_socket_admin.get()); }},
  };
  EXPECT_GE(table.size(), 60u);
  for (const BadInput& input : table) {
    grpc::Status status = input.call();
    EXPECT_EQ(status.error_code(), input.expected) << input.name << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(input.message), std::string::npos)
        << input.name << ": the message does not say \"" << input.message
        << "\": " << status.error_message();
  }
  // The profile a refusal named is still open and its owner's to finish.
  EXPECT_TRUE(finish_profile(others_profile.profile_id(), other).ok());
  // Each RNG case left its state; the daemon must still serve this session.
  EXPECT_TRUE(set_rng_state(std::string(16, '\0')).ok());
  // No refusal broke the group of one.
  EXPECT_TRUE(group_all_reduce("solo", tensor(mine.allocation_id(), {4}), v1::REDUCE_OP_SUM).ok());
  {
    grpc::ClientContext context;
    v1::ListGroupsResponse listed;
    ASSERT_TRUE(groups->ListGroups(&context, v1::ListGroupsRequest(), &listed).ok());
    ASSERT_EQ(listed.groups_size(), 1);
    EXPECT_EQ(listed.groups(0).name(), "solo");
    EXPECT_EQ(listed.groups(0).state(), "ready");
    EXPECT_EQ(listed.groups(0).collectives(), 1u);
  }

  // Still serving: the sessions work, nothing leaked, a newcomer is fine.
  ASSERT_TRUE(
      me.Free({mine.allocation_id(), plain.allocation_id(), imported.allocation().allocation_id()})
          .ok());
  ASSERT_TRUE(other.Free({theirs.allocation_id(), shared.allocation_id()}).ok());
  RawSession newcomer(channel, "newcomer");
  v1::Allocation fresh;
  ASSERT_TRUE(newcomer.Allocate(0, 1 << 20, &fresh).ok());
  ASSERT_TRUE(newcomer.Free({fresh.allocation_id()}).ok());
  for (int d = 0; d < 2; ++d) {
    v1::ObserveStatsRequest request;
    request.set_device(d);
    v1::MemoryStats stats;
    grpc::ClientContext context;
    ASSERT_TRUE(observe->GetMemoryStats(&context, request, &stats).ok());
    EXPECT_EQ(stats.values().at("allocated_bytes.all.current"), 0) << "device " << d;
    EXPECT_EQ(stats.values().at("allocation.all.current"), 0) << "device " << d;
  }
  // Sessions still open at shutdown end with UNAVAILABLE.
  newcomer.Close();
  stranger.Close();
  other.Close();
  EXPECT_EQ(daemon.Stop(), 0);
  v1::SessionServerMessage notice;
  while (me.ReadNotice(&notice)) {
  }
  EXPECT_EQ(me.Close().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace gpumux::testing
