// The TCP listener serves the observe surface and refuses everything else.

#include <memory>
#include <string>

#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"

namespace gpumux::testing {
namespace {

class TcpListenerTest : public DaemonTest {
 protected:
  Daemon::Options Options() override {
    Daemon::Options options = DaemonTest::Options();
    options.listen_address = "127.0.0.1:0";
    return options;
  }
  std::shared_ptr<grpc::Channel> Tcp() {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(daemon_->tcp_port()),
                               grpc::InsecureChannelCredentials());
  }
};

TEST_F(TcpListenerTest, ServesDevicesAndObserve) {
  ASSERT_GT(daemon_->tcp_port(), 0);
  RawSession session(channel_, "unix-client");
  ASSERT_TRUE(session.Allocate(0, 1 << 20, nullptr).ok());
  auto tcp = Tcp();
  auto device = v1::Device::NewStub(tcp);
  v1::ListDevicesResponse devices;
  grpc::ClientContext c1;
  ASSERT_TRUE(device->ListDevices(&c1, v1::ListDevicesRequest(), &devices).ok());
  ASSERT_EQ(devices.devices_size(), 2);
  EXPECT_EQ(devices.devices(0).backend(), "host");
  EXPECT_EQ(devices.devices(0).total_memory(), 64u << 20);
  EXPECT_EQ(devices.devices(0).free_memory(), 62u << 20);
  auto observe = v1::Observe::NewStub(tcp);
  v1::ObserveStatsRequest request;
  v1::MemoryStats stats;
  grpc::ClientContext c2;
  ASSERT_TRUE(observe->GetMemoryStats(&c2, request, &stats).ok());
  EXPECT_EQ(stats.values().at("allocated_bytes.all.current"), 1 << 20);
}

TEST_F(TcpListenerTest, RefusesSessionsAndMemoryWithPermissionDenied) {
  auto tcp = Tcp();
  RawSession on_unix(channel_, "unix-client");
  auto memory = v1::Memory::NewStub(tcp);
  v1::AllocateRequest request;
  request.set_size(512);
  v1::AllocateResponse response;
  grpc::Status status = memory->Allocate(on_unix.Context().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(status.error_message().find("/gpumux.v1.Memory/Allocate"), std::string::npos);

  auto sessions = v1::Session::NewStub(tcp);
  grpc::ClientContext context;
  auto stream = sessions->Open(&context);
  v1::SessionClientMessage open;
  open.mutable_open()->set_client_name("remote");
  stream->Write(open);
  v1::SessionServerMessage reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(TcpListenerTest, HealthIsServing) {
  for (auto channel : {channel_, Tcp()}) {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service("gpumux.v1.Observe");
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(health->Check(&context, request, &response).ok());
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

// Over TCP only Device and Observe are served, and health says no more.
TEST_F(TcpListenerTest, HealthOverTcpKnowsOnlyTheServicesItServes) {
  auto check = [](std::shared_ptr<grpc::Channel> channel, const std::string& service,
                  grpc::health::v1::HealthCheckResponse* response) {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::ClientContext context;
    return health->Check(&context, request, response);
  };
  grpc::health::v1::HealthCheckResponse response;
  for (const char* service :
       {"gpumux.v1.Memory", "gpumux.v1.Session", "gpumux.v1.Copy", "gpumux.v1.Stream"}) {
    EXPECT_EQ(check(Tcp(), service, &response).error_code(), grpc::StatusCode::NOT_FOUND)
        << service;
    ASSERT_TRUE(check(channel_, service, &response).ok()) << service;
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  ASSERT_TRUE(check(Tcp(), "gpumux.v1.Device", &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(TcpListenerTest, ReflectionListsTheServices) {
  // grpc.reflection.v1alpha.ServerReflectionRequest{list_services: ""} by hand:
  // Debian ships the reflection server but not its client headers.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const char request[] = {0x3a, 0x00};
  grpc::Slice slice(request, sizeof(request));
  grpc::ByteBuffer buffer(&slice, 1);
  call->Write(buffer, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  for (const char* service :
       {"gpumux.v1.Session", "gpumux.v1.Memory", "gpumux.v1.Device", "gpumux.v1.Observe"}) {
    EXPECT_NE(bytes.find(service), std::string::npos) << service;
  }
  context.TryCancel();
  grpc::Status finish;
  call->Finish(&finish, reinterpret_cast<void*>(4));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// gRPC picks a random port for an address it cannot parse; the daemon
// refuses it instead.
TEST(ListenAddressTest, APortOutsideItsRangeOrAMalformedAddressIsRefused) {
  TempDir dir;
  Daemon::Options options;
  options.socket_path = dir.path() + "/gpumux.sock";
  options.backend = "host";
  options.host_device_memory = uint64_t{64} << 20;
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:", "127.0.0.1", ":50051", "127.0.0.1:-1",
                          "127.0.0.1:8o", "::1:50051"}) {
    options.listen_address = bad;
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
    EXPECT_EQ(daemon.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(daemon.status().message().find("--listen '"), std::string::npos) << daemon.status();
  }
  options.listen_address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_GT((*daemon)->tcp_port(), 0);
}

}  // namespace
}  // namespace gpumux::testing
