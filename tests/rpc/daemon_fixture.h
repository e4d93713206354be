#pragma once

// An in-process Daemon on a temporary socket (host backend, 2 devices of
// 64 MiB unless a test says otherwise) with a channel to it.

#include <grp.h>
#include <sys/stat.h>

#include <memory>

#include "gtest/gtest.h"
#include "server/daemon.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {

// A host-backend daemon's options with its sockets in `dir` (opened to
// others here) owned by the group "nogroup", for tests that connect as
// another user; `gid` receives that group's id (a test failure when there
// is none).
inline Daemon::Options NogroupSocketOptions(const TempDir& dir, gid_t* gid) {
  EXPECT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const struct group* nogroup = getgrnam("nogroup");
  EXPECT_NE(nogroup, nullptr);
  *gid = nogroup != nullptr ? nogroup->gr_gid : 0;
  Daemon::Options options;
  options.socket_path = dir.path() + "/gpumux.sock";
  options.backend = "host";
  options.host_device_memory = uint64_t{64} << 20;
  options.socket_group = "nogroup";
  return options;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { StartDaemon(Options()); }

  virtual Daemon::Options Options() {
    Daemon::Options options;
    options.socket_path = dir_.path() + "/gpumux.sock";
    options.backend = "host";
    options.host_devices = 2;
    options.host_device_memory = uint64_t{64} << 20;
    return options;
  }

  void StartDaemon(const Daemon::Options& options) {
    auto daemon = Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    channel_ =
        grpc::CreateChannel("unix://" + options.socket_path, grpc::InsecureChannelCredentials());
  }

  const std::string& socket_path() const { return daemon_->socket_path(); }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace gpumux::testing
