#pragma once

// The fixture of the tests that run the client library against the real
// daemon: an InProcessDaemon (host backend, temporary socket) and a Client
// connected to it before the test body runs, plus more clients on demand.
// A suite that needs other devices or client options derives a fixture that
// passes them to the constructor. Once SetUp ran, the accessors may be used
// from any thread of the test (Client and InProcessDaemon are thread-safe).

#include <memory>
#include <utility>

#include "gpumux/client.h"
#include "gpumux/client_options.h"
#include "gtest/gtest.h"
#include "tests/support/in_process_daemon.h"

namespace gpumux::testing {

class DaemonClientTest : public ::testing::Test {
 protected:
  struct Options {
    InProcessDaemon::Options daemon;  // 2 host devices of 64 MiB
    ClientOptions client;             // those of client()
    bool connect = true;              // false: no client(), only ConnectAnother()
  };

  DaemonClientTest() : DaemonClientTest(Options()) {}
  explicit DaemonClientTest(Options options) : options_(std::move(options)) {}

  // Starts the daemon and connects client() (unless options.connect is
  // false): a fatal failure (the body does not run) when either fails.
  void SetUp() override;

  InProcessDaemon& daemon() { return *daemon_; }
  // The client SetUp connected. Precondition: options.connect, and
  // DisconnectClient() not called.
  Client& client() { return *client_; }
  // Destroys client() as a test's own Client would go: its queued frees are
  // sent and its session ends.
  void DisconnectClient() { client_.reset(); }
  // Another client of the daemon, with a session of its own; nullptr (and a
  // test failure) when it cannot connect.
  std::unique_ptr<Client> ConnectAnother(const ClientOptions& options = ClientOptions());

 private:
  Options options_;
  std::unique_ptr<InProcessDaemon> daemon_;
  std::unique_ptr<Client> client_;
};

}  // namespace gpumux::testing
