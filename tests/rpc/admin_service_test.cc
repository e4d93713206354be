// gpumux.v1.Admin against a real gpumuxd child: tenant limits from the flag
// (repeated and comma-separated) and at run time, enforced on the tenant's
// sessions together, listed with their figures; emptying every session's
// cache; and who may call it: only root and gpumuxd's own uid on the admin
// socket, never the main socket.

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/net/admin_socket.h"
#include "gmock/gmock.h"
#include "gpumux/v1/admin.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/support/raw_session.h"
#include "tests/support/shell_run.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::unique_ptr<v1::Admin::Stub> AdminStub(const DaemonProcess& daemon) {
  return v1::Admin::NewStub(grpc::CreateChannel("unix://" + AdminSocketPath(daemon.socket_path()),
                                                grpc::InsecureChannelCredentials()));
}

v1::ListTenantsResponse ListTenants(v1::Admin::Stub& admin) {
  grpc::ClientContext context;
  v1::ListTenantsResponse response;
  grpc::Status status = admin.ListTenants(&context, v1::ListTenantsRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

const v1::TenantInfo* Find(const v1::ListTenantsResponse& response, const std::string& tenant) {
  for (const v1::TenantInfo& info : response.tenants()) {
    if (info.tenant() == tenant) return &info;
  }
  return nullptr;
}

grpc::Status SetLimit(v1::Admin::Stub& admin, const std::string& tenant, int device,
                      uint64_t bytes) {
  v1::SetTenantLimitRequest request;
  request.set_tenant(tenant);
  if (device < 0) {
    request.set_all_devices(true);
  } else {
    request.set_device(device);
  }
  if (bytes == 0) {
    request.set_unlimited(true);
  } else {
    request.set_bytes(bytes);
  }
  grpc::ClientContext context;
  v1::SetTenantLimitResponse response;
  return admin.SetTenantLimit(&context, request, &response);
}

TEST(AdminServiceTest, FlagLimitsApplyToEveryDeviceAndChangeAtRunTime) {
  DaemonProcess daemon({"--host-devices=2", "--host-device-memory=256MiB",
                        "--tenant-memory-limit=pod-a=40MiB,x=y=1MiB", "--tenant-memory-limit",
                        "pod-b=1GiB"});
  auto admin = AdminStub(daemon);
  v1::ListTenantsResponse tenants = ListTenants(*admin);
  ASSERT_EQ(tenants.tenants_size(), 3);
  const v1::TenantInfo* a = Find(tenants, "pod-a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->devices_size(), 2);
  EXPECT_EQ(a->devices(1).limit_bytes(), 40 * kMiB);
  ASSERT_NE(Find(tenants, "pod-b"), nullptr);
  EXPECT_EQ(Find(tenants, "pod-b")->devices(0).limit_bytes(), 1024 * kMiB);
  ASSERT_NE(Find(tenants, "x=y"), nullptr);  // the last '=' separates the size

  RawSession one(daemon.channel(), "one", "pod-a");
  RawSession two(daemon.channel(), "two", "pod-a");
  v1::Allocation first, second, refused;
  ASSERT_TRUE(one.Allocate(0, 20 * kMiB, &first).ok());
  ASSERT_TRUE(two.Allocate(0, 20 * kMiB, &second).ok());
  grpc::Status over = one.Allocate(0, 2 * kMiB, &refused);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over.error_message(), HasSubstr("Its tenant 'pod-a' has 40.00 MiB reserved on GPU 0 "
                                              "over 2 sessions, of its 40.00 MiB limit"));
  // Device 1 has its own 40 MiB.
  ASSERT_TRUE(one.Allocate(1, 20 * kMiB, &refused).ok());

  tenants = ListTenants(*admin);
  a = Find(tenants, "pod-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->devices(0).reserved_bytes(), 40 * kMiB);
  EXPECT_EQ(a->devices(0).allocated_bytes(), 40 * kMiB);
  EXPECT_EQ(a->devices(0).session_ids_size(), 2);
  EXPECT_EQ(a->devices(1).reserved_bytes(), 20 * kMiB);

  // Raised on device 0 only, at run time.
  ASSERT_TRUE(SetLimit(*admin, "pod-a", 0, 64 * kMiB).ok());
  v1::Allocation more;
  EXPECT_TRUE(two.Allocate(0, 2 * kMiB, &more).ok());
  tenants = ListTenants(*admin);
  EXPECT_EQ(Find(tenants, "pod-a")->devices(0).limit_bytes(), 64 * kMiB);
  EXPECT_EQ(Find(tenants, "pod-a")->devices(1).limit_bytes(), 40 * kMiB);
  // Removed everywhere.
  ASSERT_TRUE(SetLimit(*admin, "pod-a", -1, 0).ok());
  EXPECT_TRUE(one.Allocate(0, 100 * kMiB, &more).ok());
  // A tenant without sessions yet keeps its limit for them.
  ASSERT_TRUE(SetLimit(*admin, "later", -1, 8 * kMiB).ok());
  RawSession late(daemon.channel(), "late", "later");
  EXPECT_EQ(late.Allocate(0, 10 * kMiB, &more).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(AdminServiceTest, OnlyOperatorsOnTheAdminSocketMayCallIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as nobody";
  DaemonProcess daemon({"--host-devices=1", "--socket-group=nogroup"});
  // The main socket refuses Admin outright.
  auto wrong = v1::Admin::NewStub(daemon.channel());
  grpc::ClientContext context;
  v1::ListTenantsResponse response;
  grpc::Status status = wrong->ListTenants(&context, v1::ListTenantsRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("connect to the admin socket"));

  // nobody in the socket's group may connect, and is refused: the CLI run as
  // nobody says so.
  const std::string dir = std::filesystem::path(daemon.socket_path()).parent_path();
  ASSERT_EQ(chmod(dir.c_str(), 0711), 0);
  const std::string cli = TestBinary(std::string(GPUMUX_BINARY_DIR) + "/client/cli/gpumux");
  const ShellRun run =
      RunProgram({cli, "--address", daemon.address(), "tenant-limit", "pod", "1GiB"}, 65534);
  const std::string& output = run.output;
  EXPECT_EQ(run.exit_code, 1) << output;
  EXPECT_THAT(output, HasSubstr("PERMISSION_DENIED: gpumux.v1.Admin serves only root and "
                                "gpumuxd's own uid 0"));
  // Nothing changed; root is served.
  auto admin = AdminStub(daemon);
  EXPECT_EQ(Find(ListTenants(*admin), "pod"), nullptr);
  EXPECT_TRUE(SetLimit(*admin, "pod", 0, kMiB).ok());
  EXPECT_NE(Find(ListTenants(*admin), "pod"), nullptr);
  EXPECT_EQ(daemon.Stop(), 0);
}

// Emptying every session's cache is an operator's action: a session of
// another tenant, of any uid, used to release a victim's whole cache with
// Memory.EmptyCache(all_sessions).
TEST(AdminServiceTest, EmptyingEveryCacheIsAnOperatorsAction) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as nobody";
  DaemonProcess daemon({"--host-devices=1", "--socket-group=nogroup"});
  RawSession victim(daemon.channel(), "victim", "team-a");
  v1::Allocation held;
  ASSERT_TRUE(victim.Allocate(0, 40 * kMiB, &held).ok());
  ASSERT_TRUE(victim.Free({held.allocation_id()}).ok());  // cached, 40 MiB
  auto reserved = [&] {
    return ListTenants(*AdminStub(daemon)).tenants(0).devices(0).reserved_bytes();
  };
  ASSERT_EQ(reserved(), 40 * kMiB);

  // Another tenant's session on the main socket is refused, and says where
  // the operator's action is.
  RawSession other(daemon.channel(), "other", "team-b");
  v1::EmptyCacheRequest request;
  request.set_all_devices(true);
  request.set_all_sessions(true);
  v1::EmptyCacheResponse response;
  grpc::Status refused = other.memory().EmptyCache(other.Context().get(), request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(), HasSubstr("Admin.EmptyCache on the admin socket"));
  // So is the CLI run as nobody.
  const std::string dir = std::filesystem::path(daemon.socket_path()).parent_path();
  ASSERT_EQ(chmod(dir.c_str(), 0711), 0);
  const std::string cli = TestBinary(std::string(GPUMUX_BINARY_DIR) + "/client/cli/gpumux");
  const ShellRun nobody = RunProgram({cli, "--address", daemon.address(), "empty-cache"}, 65534);
  EXPECT_EQ(nobody.exit_code, 1) << nobody.output;
  EXPECT_THAT(nobody.output, HasSubstr("PERMISSION_DENIED"));
  EXPECT_EQ(reserved(), 40 * kMiB);

  // Bad targets, then root's call releases it.
  auto admin = AdminStub(daemon);
  auto empty = [&](const v1::AdminEmptyCacheRequest& target, v1::AdminEmptyCacheResponse* out) {
    grpc::ClientContext context;
    return admin->EmptyCache(&context, target, out);
  };
  v1::AdminEmptyCacheResponse released;
  EXPECT_EQ(empty(v1::AdminEmptyCacheRequest(), &released).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::AdminEmptyCacheRequest bad;
  bad.set_all_devices(false);
  EXPECT_EQ(empty(bad, &released).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad.set_device(7);
  EXPECT_EQ(empty(bad, &released).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const ShellRun root = RunProgram({cli, "--address", daemon.address(), "empty-cache"});
  EXPECT_EQ(root.exit_code, 0) << root.output;
  EXPECT_THAT(root.output, HasSubstr("released 41943040 bytes (40.00 MiB) in 1 segment"));
  EXPECT_EQ(reserved(), 0u);
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
}  // namespace gpumux::testing
