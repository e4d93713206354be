// The Device service's view of device health and build facts: what
// `gpumux devices` and operators' probes read. A backend that reports a lost
// device (as CudaBackend does after a sticky CUDA error) stands in for a GPU.
// And its synchronize, which reports a session's asynchronous error.

#include "server/rpc/device_service.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/backend/forwarding_backend.h"
#include "server/backend/host/host_backend.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"
#include "server/rpc/blocking_executor.h"
#include "server/rpc/session_auth.h"
#include "tests/support/raw_session.h"

namespace gpumux {
namespace {

// Device 1 lost its context.
class LostDeviceBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  absl::Status DeviceHealth(DeviceIndex device) const override {
    if (device == DeviceIndex(1)) {
      return absl::UnavailableError(
          "CUDA device 1 is unhealthy: cudaErrorIllegalAddress; its context is lost until gpumuxd "
          "restarts");
    }
    return target()->DeviceHealth(device);
  }
};

class DeviceServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostBackend::Options options;
    options.device_count = 2;
    options.device_memory = uint64_t{64} << 20;
    absl::StatusOr<std::unique_ptr<HostBackend>> host = HostBackend::Create(options);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = *std::move(host);
    backend_ = std::make_unique<LostDeviceBackend>(host_.get());
    streams_ = std::make_unique<StreamManager>(backend_.get());
    service_ =
        std::make_unique<DeviceService>(backend_.get(), &executor_, &sessions_, streams_.get());
    const std::string address = "unix://" + dir_.path() + "/device.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Device::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  testing::TempDir dir_;
  std::unique_ptr<HostBackend> host_;
  std::unique_ptr<LostDeviceBackend> backend_;
  BlockingExecutor executor_;
  SessionRegistry sessions_;
  std::unique_ptr<StreamManager> streams_;
  std::unique_ptr<DeviceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Device::Stub> stub_;
};

TEST_F(DeviceServiceTest, ReportsEachDevicesHealth) {
  grpc::ClientContext context;
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(stub_->ListDevices(&context, v1::ListDevicesRequest(), &devices).ok());
  ASSERT_EQ(devices.devices_size(), 2);
  EXPECT_TRUE(devices.devices(0).healthy());
  EXPECT_EQ(devices.devices(0).health(), "ok");
  EXPECT_FALSE(devices.devices(1).healthy());
  EXPECT_THAT(devices.devices(1).health(), ::testing::HasSubstr("CUDA device 1 is unhealthy"));

  grpc::ClientContext one;
  v1::GetDevicePropertiesRequest request;
  request.set_device(1);
  v1::DeviceProperties properties;
  ASSERT_TRUE(stub_->GetDeviceProperties(&one, request, &properties).ok());
  EXPECT_FALSE(properties.healthy());
  EXPECT_EQ(properties.health(), devices.devices(1).health());
}

// The host backend has no PCI bus, device code or driver: those stay empty.
TEST_F(DeviceServiceTest, HostDevicesHaveNoCudaFacts) {
  grpc::ClientContext context;
  v1::GetDevicePropertiesRequest request;
  v1::DeviceProperties properties;
  ASSERT_TRUE(stub_->GetDeviceProperties(&context, request, &properties).ok());
  EXPECT_EQ(properties.backend(), "host");
  EXPECT_EQ(properties.pci_bus_id(), "");
  EXPECT_EQ(properties.arch_list_size(), 0);
  EXPECT_EQ(properties.gencode_flags(), "");
  EXPECT_EQ(properties.driver_version(), 0);
  EXPECT_EQ(properties.runtime_version(), 0);
  EXPECT_EQ(properties.collectives(), "copies");  // the host backend has no engine
}

// torch.cuda.synchronize() raises an earlier asynchronous failure: the
// session's synchronize of the device reports its async error once; a call
// of no session (an observer's) only waits.
TEST_F(DeviceServiceTest, SynchronizeReportsTheSessionsAsyncErrorOnce) {
  absl::StatusOr<OpenedSession> opened =
      sessions_.Open(SessionRecord{.client_name = "sync"}, nullptr);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const SessionId session = opened->info.id;
  streams_->AddSession(session);
  streams_->NoteAsyncError(session, DeviceIndex(1),
                           absl::UnavailableError("all_reduce queued with async_op failed"));
  streams_->NoteAsyncError(session, DeviceIndex(1), absl::UnavailableError("a later one"));
  const auto synchronize = [&](int device, bool as_session) {
    grpc::ClientContext context;
    if (as_session) {
      context.AddMetadata(kSessionMetadataKey, absl::StrCat(session.value(), ":", opened->secret));
    }
    v1::SynchronizeRequest request;
    request.set_device(device);
    v1::SynchronizeResponse response;
    return stub_->Synchronize(&context, request, &response);
  };
  EXPECT_TRUE(synchronize(1, /*as_session=*/false).ok());
  EXPECT_TRUE(synchronize(0, /*as_session=*/true).ok());  // another device's
  const grpc::Status reported = synchronize(1, /*as_session=*/true);
  EXPECT_EQ(reported.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(reported.error_message(),
            "all_reduce queued with async_op failed (1 more queued after it on this device "
            "failed too)");
  EXPECT_TRUE(synchronize(1, /*as_session=*/true).ok());  // reported once
  // Nothing is kept for a session that ended.
  streams_->ReleaseSession(session);
  streams_->NoteAsyncError(session, DeviceIndex(1), absl::InternalError("after the end"));
  EXPECT_TRUE(streams_->TakeAsyncError(session, DeviceIndex(1)).ok());
}

}  // namespace
}  // namespace gpumux
