#pragma once

// An in-process Daemon on a temporary socket (host backend, 2 devices of
// 64 MiB unless a test says otherwise) with a channel to it.

#include <memory>

#include "gtest/gtest.h"
#include "server/daemon.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {

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
    channel_ = grpc::CreateChannel("unix://" + options.socket_path, grpc::InsecureChannelCredentials());
  }

  const std::string& socket_path() const { return daemon_->socket_path(); }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace gpumux::testing
