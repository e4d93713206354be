// devices, stats, summary, snapshot, sessions: the read-only observe surface.
// They need no session, so they also work against a daemon's TCP listener.

#include <cstdint>
#include <limits>
#include <memory>

#include "client/channel.h"
#include "client/cli/commands.h"
#include "client/cli/devices_format.h"
#include "client/cli/flag_parser.h"
#include "client/cli/sessions_format.h"
#include "client/cli/snapshot_format.h"
#include "client/cli/stats_format.h"
#include "client/grpc_status.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace gpumux {
namespace {

constexpr int64_t kMaxDevice = std::numeric_limits<int32_t>::max();
// An observe call that takes longer than this means a wedged daemon.
constexpr auto kCallTimeout = std::chrono::seconds(30);

// Runs one unary call with a deadline; the status as FromGrpcStatus makes it.
template <typename Call>
absl::Status CallDaemon(const CommandContext& context, Call call) {
  grpc::ClientContext client_context;
  client_context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  return FromGrpcStatus(call(&client_context), context.address);
}

// --device, --session and the output switch shared by stats/summary/snapshot.
struct ObserveArgs {
  bool has_device = false;
  int32_t device = 0;
  uint64_t session = 0;
  bool json = false;
  bool abbreviated = false;
};

// Parses `args` against `specs`; on failure prints the usage and returns false
// with *exit_code set.
bool ParseObserveArgs(const CommandContext& context, const std::vector<std::string>& args,
                      const std::vector<FlagSpec>& specs, const char* usage, ObserveArgs* out,
                      int* exit_code) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, specs);
  absl::Status status = parsed.status();
  if (status.ok() && !parsed->positional.empty()) {
    status = absl::InvalidArgumentError("unexpected argument " + parsed->positional.front());
  }
  if (status.ok()) {
    absl::StatusOr<int64_t> device = IntFlag(*parsed, "device", 0, 0, kMaxDevice);
    absl::StatusOr<uint64_t> session = UintFlag(*parsed, "session", 0);
    status.Update(device.status());
    status.Update(session.status());
    if (status.ok()) {
      out->has_device = parsed->Has("device");
      out->device = static_cast<int32_t>(*device);
      out->session = *session;
      out->json = parsed->Has("json");
      out->abbreviated = parsed->Has("abbreviated");
    }
  }
  if (!status.ok()) *exit_code = UsageError(context, status.message(), usage);
  return status.ok();
}

std::unique_ptr<v1::Observe::Stub> ObserveStub(const CommandContext& context) {
  return v1::Observe::NewStub(CreateDaemonChannel(context.address));
}

}  // namespace

int RunDevices(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"json"}}, kDevicesUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  auto stub = v1::Device::NewStub(CreateDaemonChannel(context.address));
  v1::ListDevicesResponse response;
  absl::Status status = CallDaemon(context, [&](grpc::ClientContext* c) {
    return stub->ListDevices(c, v1::ListDevicesRequest(), &response);
  });
  if (!status.ok()) return ReportError(context, status);
  *context.out << (parsed.json ? FormatDevicesJson(response) : FormatDevicesTable(response));
  return kExitOk;
}

int RunStats(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"device", true}, {"session", true}, {"json"}}, kStatsUsage,
                        &parsed, &exit_code)) {
    return exit_code;
  }
  v1::ObserveStatsRequest request;
  request.set_device(parsed.device);
  request.set_session_id(parsed.session);
  v1::MemoryStats response;
  auto stub = ObserveStub(context);
  absl::Status status = CallDaemon(
      context, [&](grpc::ClientContext* c) { return stub->GetMemoryStats(c, request, &response); });
  if (!status.ok()) return ReportError(context, status);
  *context.out << (parsed.json ? FormatStatsJson(response) : FormatStatsLines(response));
  return kExitOk;
}

int RunSummary(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"device", true}, {"session", true}, {"abbreviated"}},
                        kSummaryUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  v1::ObserveSummaryRequest request;
  request.set_device(parsed.device);
  request.set_session_id(parsed.session);
  request.set_abbreviated(parsed.abbreviated);
  v1::MemorySummary response;
  auto stub = ObserveStub(context);
  absl::Status status = CallDaemon(context, [&](grpc::ClientContext* c) {
    return stub->GetMemorySummary(c, request, &response);
  });
  if (!status.ok()) return ReportError(context, status);
  *context.out << response.text();
  return kExitOk;
}

int RunSnapshot(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"device", true}, {"session", true}, {"json"}},
                        kSnapshotUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  v1::ObserveSnapshotRequest request;
  // No --device: every device.
  request.set_device(parsed.device);
  request.set_all_devices(!parsed.has_device);
  request.set_session_id(parsed.session);
  v1::MemorySnapshot response;
  auto stub = ObserveStub(context);
  absl::Status status = CallDaemon(context, [&](grpc::ClientContext* c) {
    return stub->GetMemorySnapshot(c, request, &response);
  });
  if (!status.ok()) return ReportError(context, status);
  *context.out << (parsed.json ? FormatSnapshotJson(response) : FormatSnapshotTable(response));
  return kExitOk;
}

int RunSessions(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"json"}}, kSessionsUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  v1::ListSessionsResponse response;
  auto stub = ObserveStub(context);
  absl::Status status = CallDaemon(context, [&](grpc::ClientContext* c) {
    return stub->ListSessions(c, v1::ListSessionsRequest(), &response);
  });
  if (!status.ok()) return ReportError(context, status);
  *context.out << (parsed.json ? FormatSessionsJson(response) : FormatSessionsTable(response));
  return kExitOk;
}

}  // namespace gpumux
