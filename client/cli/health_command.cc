// health: grpc.health.v1 of every gpumux.v1 service at the address, and each
// device's health (Device.ListDevices). On a Unix socket every service is
// checked (Admin on the admin socket next to it). Over TCP the observe mode
// serves only Device and Observe and the full mode every service but Admin:
// a service the listener's health does not know is listed as not served over
// TCP, which is no failure (Device and Observe must serve). Exit 0 only when
// everything checked serves.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/channel.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "client/cli/text_table.h"
#include "client/grpc_status.h"
#include "common/net/admin_socket.h"
#include "gpumux/common/default_address.h"
#include "gpumux/observer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace gpumux {
namespace {

constexpr auto kCheckTimeout = std::chrono::seconds(5);

// What gpumuxd serves on its Unix socket, in its own order; Admin is on the
// admin socket.
constexpr const char* kServices[] = {"gpumux.v1.Session", "gpumux.v1.Device", "gpumux.v1.Memory",
                                     "gpumux.v1.Observe", "gpumux.v1.Stream", "gpumux.v1.Event",
                                     "gpumux.v1.Copy",    "gpumux.v1.Random", "gpumux.v1.Nvtx",
                                     "gpumux.v1.Comm",    "gpumux.v1.Group",  "gpumux.v1.Profile"};
constexpr char kAdmin[] = "gpumux.v1.Admin";

bool ServedOverTcp(absl::string_view service) {
  return service == "gpumux.v1.Device" || service == "gpumux.v1.Observe";
}

struct Check {
  std::string service;
  std::string where;
  std::string status;
  bool counts = true;  // false: not served there, or not ours to see
  bool ok = false;
};

// One Health.Check; UNAVAILABLE (the daemon cannot be reached) comes back as
// an error, every other answer as the status column.
absl::Status CheckOne(grpc::health::v1::Health::Stub& stub, const std::string& address,
                      Check& check) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(check.service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCheckTimeout);
  const grpc::Status status = stub.Check(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return FromGrpcStatus(status, address);
  }
  if (!status.ok()) {
    check.status = absl::StrCat(status.error_code() == grpc::StatusCode::NOT_FOUND
                                    ? "NOT_FOUND (not registered)"
                                    : absl::StrCat("error ", status.error_code()),
                                status.error_message().empty() ? "" : ": ", status.error_message());
    return absl::OkStatus();
  }
  check.status = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  check.ok = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  return absl::OkStatus();
}

}  // namespace

int RunHealth(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {});
  absl::Status status = parsed.status();
  if (status.ok() && !parsed->positional.empty()) {
    status = absl::InvalidArgumentError("unexpected argument " + parsed->positional.front());
  }
  if (!status.ok()) return UsageError(context, status.message(), kHealthUsage);

  const std::string target = ToGrpcTarget(context.address);
  const bool unix_socket = absl::StartsWith(target, "unix:");
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateDaemonChannel(target, context.security);
  if (!channel.ok()) return ReportError(context, channel.status());
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  std::vector<Check> checks;
  for (const char* service : kServices) {
    Check& check = checks.emplace_back(Check{.service = service, .where = target});
    status = CheckOne(*stub, context.address, check);
    if (!status.ok()) return ReportError(context, status);
    if (!unix_socket && !ServedOverTcp(service) && absl::StartsWith(check.status, "NOT_FOUND")) {
      check.status = "not served over TCP";  // an observe-mode listener
      check.counts = false;
    }
  }
  Check& admin = checks.emplace_back(Check{.service = kAdmin});
  if (!unix_socket) {
    admin.where = target;
    admin.status = "not served over TCP";
    admin.counts = false;
  } else {
    admin.where = AdminSocketPath(target);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> admin_channel =
        CreateDaemonChannel(admin.where, context.security);
    if (!admin_channel.ok()) return ReportError(context, admin_channel.status());
    auto admin_stub = grpc::health::v1::Health::NewStub(*admin_channel);
    status = CheckOne(*admin_stub, admin.where, admin);
    if (!status.ok()) return ReportError(context, status);
    // The admin socket hands a peer that is neither root nor gpumuxd's user
    // to a server that serves no Admin, so it cannot tell.
    if (!admin.ok && absl::StartsWith(admin.status, "NOT_FOUND")) {
      admin.status = "not checked: served to root and gpumuxd's user only";
      admin.counts = false;
    }
  }

  absl::StatusOr<std::vector<DeviceProperties>> devices =
      Observer(context.address, context.security).ListDevices();
  if (!devices.ok()) return ReportError(context, devices.status());

  bool all_ok = true;
  TextTable services({"SERVICE", "ADDRESS", "STATUS"});
  for (const Check& check : checks) {
    all_ok &= check.ok || !check.counts;
    services.AddRow({check.service, check.where, check.status});
  }
  TextTable table({"DEVICE", "NAME", "HEALTH"});
  table.AlignRight(0);
  for (const DeviceProperties& device : *devices) {
    all_ok &= device.healthy;
    table.AddRow({absl::StrCat(device.index), device.name,
                  device.healthy ? "ok" : absl::StrCat("UNHEALTHY: ", device.health)});
  }
  *context.out << services.Render() << "\n"
               << table.Render() << "\n"
               << (all_ok ? "healthy" : "NOT healthy: see above") << "\n";
  return all_ok ? kExitOk : kExitFailure;
}

}  // namespace gpumux
