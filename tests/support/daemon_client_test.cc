#include "tests/support/daemon_client_test.h"

#include <utility>

#include "tests/status_matchers.h"

namespace gpumux::testing {

void DaemonClientTest::SetUp() {
  daemon_ = std::make_unique<InProcessDaemon>(options_.daemon);
  if (!options_.connect) return;
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(daemon_->address(), options_.client);
  ASSERT_OK(client);
  client_ = std::move(client).value();
}

std::unique_ptr<Client> DaemonClientTest::ConnectAnother(const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(daemon_->address(), options);
  EXPECT_OK(client);
  return client.ok() ? std::move(client).value() : nullptr;
}

}  // namespace gpumux::testing
