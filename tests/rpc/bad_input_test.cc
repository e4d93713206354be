// A table of bad inputs against a real gpumuxd child process: each gets its
// exact status code, and the daemon keeps serving everyone afterwards with
// nothing leaked.

#include <functional>
#include <string>
#include <vector>

#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

struct BadInput {
  std::string name;
  grpc::StatusCode expected;
  std::function<grpc::Status()> call;
};

TEST(BadInputTest, EachGetsItsExactStatusAndTheDaemonKeepsServing) {
  DaemonProcess daemon({"--host-devices=2", "--host-device-memory=64MiB"});
  auto channel = daemon.channel();
  RawSession me(channel, "me");
  RawSession other(channel, "other");
  auto observe = v1::Observe::NewStub(channel);
  auto device = v1::Device::NewStub(channel);

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

  const std::vector<BadInput> table = {
      {"size 0", grpc::StatusCode::INVALID_ARGUMENT, [&] { return me.Allocate(0, 0, nullptr); }},
      {"size above device memory", grpc::StatusCode::INVALID_ARGUMENT,
       [&] { return me.Allocate(0, (64u << 20) + 1, nullptr); }},
      {"size near 2^64", grpc::StatusCode::INVALID_ARGUMENT, [&] { return me.Allocate(0, ~uint64_t{0}, nullptr); }},
      {"device out of range", grpc::StatusCode::INVALID_ARGUMENT, [&] { return me.Allocate(2, 512, nullptr); }},
      {"negative device", grpc::StatusCode::INVALID_ARGUMENT, [&] { return me.Allocate(-1, 512, nullptr); }},
      {"unknown stream", grpc::StatusCode::NOT_FOUND, [&] { return me.Allocate(0, 512, nullptr, false, 7); }},
      {"unknown id", grpc::StatusCode::NOT_FOUND, [&] { return me.Free({999999}); }},
      {"freed id", grpc::StatusCode::NOT_FOUND, [&] { return me.Free({freed.allocation_id()}); }},
      {"foreign id", grpc::StatusCode::NOT_FOUND, [&] { return me.Free({theirs.allocation_id()}); }},
      {"id named twice", grpc::StatusCode::INVALID_ARGUMENT,
       [&] { return me.Free({mine.allocation_id(), mine.allocation_id()}); }},
      {"share a foreign id", grpc::StatusCode::NOT_FOUND, [&] { return share(theirs.allocation_id()); }},
      {"share a non-shareable allocation", grpc::StatusCode::FAILED_PRECONDITION,
       [&] { return share(plain.allocation_id()); }},
      {"garbage share token", grpc::StatusCode::INVALID_ARGUMENT, [&] { return import("not a token \x01"); }},
      {"empty share token", grpc::StatusCode::INVALID_ARGUMENT, [&] { return import(""); }},
      {"unknown share token", grpc::StatusCode::NOT_FOUND,
       [&] { return import("gpumux-share-00000000000000000000000000000000"); }},
      {"replayed share token", grpc::StatusCode::FAILED_PRECONDITION, [&] { return import(token.token()); }},
      {"fraction above 1", grpc::StatusCode::INVALID_ARGUMENT, [&] { return limit(1.5); }},
      {"negative fraction", grpc::StatusCode::INVALID_ARGUMENT, [&] { return limit(-0.1); }},
      {"stats of a device out of range", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         v1::GetStatsRequest request;
         request.set_device(9);
         v1::MemoryStats stats;
         return me.memory().GetStats(me.Context().get(), request, &stats);
       }},
      {"observe an unknown session", grpc::StatusCode::NOT_FOUND,
       [&] {
         v1::ObserveStatsRequest request;
         request.set_session_id(424242);
         v1::MemoryStats stats;
         grpc::ClientContext context;
         return observe->GetMemoryStats(&context, request, &stats);
       }},
      {"properties of a device out of range", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         v1::GetDevicePropertiesRequest request;
         request.set_device(5);
         v1::DeviceProperties properties;
         grpc::ClientContext context;
         return device->GetDeviceProperties(&context, request, &properties);
       }},
      {"quota overrun", grpc::StatusCode::RESOURCE_EXHAUSTED,
       [&] {
         if (grpc::Status s = limit(0.25); !s.ok()) return s;  // 16 MiB
         return me.Allocate(0, 30 << 20, nullptr);
       }},
      {"device out of memory", grpc::StatusCode::RESOURCE_EXHAUSTED,
       [&] {
         v1::Allocation big;
         if (grpc::Status s = other.Allocate(0, 40 << 20, &big); !s.ok()) return s;
         grpc::Status s = other.Allocate(0, 40 << 20, nullptr);
         other.Free({big.allocation_id()});
         return s;
       }},
  };
  for (const BadInput& input : table) {
    grpc::Status status = input.call();
    EXPECT_EQ(status.error_code(), input.expected) << input.name << ": " << status.error_message();
    EXPECT_FALSE(status.error_message().empty()) << input.name;
  }

  // Still serving: the sessions work, nothing leaked, a newcomer is fine.
  ASSERT_TRUE(me.Free({mine.allocation_id(), plain.allocation_id(), imported.allocation().allocation_id()}).ok());
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
  other.Close();
  EXPECT_EQ(daemon.Stop(), 0);
  v1::SessionServerMessage notice;
  while (me.ReadNotice(&notice)) {
  }
  EXPECT_EQ(me.Close().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace gpumux::testing
