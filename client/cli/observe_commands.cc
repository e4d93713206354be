// devices, stats, summary, snapshot, sessions, groups: the read-only observe
// surface.
// They need no session, so they also work against a daemon's TCP listener.

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/devices_format.h"
#include "client/cli/flag_parser.h"
#include "client/cli/groups_format.h"
#include "client/cli/sessions_format.h"
#include "client/cli/snapshot_format.h"
#include "client/cli/stats_format.h"
#include "gpumux/observer.h"

namespace gpumux {
namespace {

constexpr int64_t kMaxDevice = std::numeric_limits<int32_t>::max();

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

// --session as the API takes it: 0 (the default) means the whole device.
std::optional<SessionId> SessionOf(const ObserveArgs& args) {
  if (args.session == 0) return std::nullopt;
  return SessionId(args.session);
}

}  // namespace

int RunDevices(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"json"}}, kDevicesUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  absl::StatusOr<std::vector<DeviceProperties>> devices =
      Observer(context.address, context.security).ListDevices();
  if (!devices.ok()) return ReportError(context, devices.status());
  *context.out << (parsed.json ? FormatDevicesJson(*devices) : FormatDevicesTable(*devices));
  return kExitOk;
}

int RunStats(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"device", true}, {"session", true}, {"json"}}, kStatsUsage,
                        &parsed, &exit_code)) {
    return exit_code;
  }
  absl::StatusOr<std::map<std::string, int64_t>> stats =
      Observer(context.address, context.security)
          .MemoryStats(DeviceIndex(parsed.device), SessionOf(parsed));
  if (!stats.ok()) return ReportError(context, stats.status());
  *context.out << (parsed.json ? FormatStatsJson(*stats) : FormatStatsLines(*stats));
  return kExitOk;
}

int RunSummary(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"device", true}, {"session", true}, {"abbreviated"}},
                        kSummaryUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  absl::StatusOr<std::string> summary =
      Observer(context.address, context.security)
          .MemorySummary(DeviceIndex(parsed.device), SessionOf(parsed), parsed.abbreviated);
  if (!summary.ok()) return ReportError(context, summary.status());
  *context.out << *summary;
  return kExitOk;
}

int RunSnapshot(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"device", true}, {"session", true}, {"json"}},
                        kSnapshotUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  // No --device: every device.
  const std::optional<DeviceIndex> device =
      parsed.has_device ? std::optional<DeviceIndex>(DeviceIndex(parsed.device)) : std::nullopt;
  absl::StatusOr<std::vector<SegmentInfo>> segments =
      Observer(context.address, context.security).MemorySnapshot(device, SessionOf(parsed));
  if (!segments.ok()) return ReportError(context, segments.status());
  *context.out << (parsed.json ? FormatSnapshotJson(*segments) : FormatSnapshotTable(*segments));
  return kExitOk;
}

int RunSessions(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"json"}}, kSessionsUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  absl::StatusOr<std::vector<SessionInfo>> sessions =
      Observer(context.address, context.security).ListSessions();
  if (!sessions.ok()) return ReportError(context, sessions.status());
  *context.out << (parsed.json ? FormatSessionsJson(*sessions) : FormatSessionsTable(*sessions));
  return kExitOk;
}

int RunGroups(const CommandContext& context, const std::vector<std::string>& args) {
  ObserveArgs parsed;
  int exit_code;
  if (!ParseObserveArgs(context, args, {{"json"}}, kGroupsUsage, &parsed, &exit_code)) {
    return exit_code;
  }
  absl::StatusOr<std::vector<DaemonGroupInfo>> groups =
      Observer(context.address, context.security).ListGroups();
  if (!groups.ok()) return ReportError(context, groups.status());
  *context.out << (parsed.json ? FormatGroupsJson(*groups) : FormatGroupsTable(*groups));
  return kExitOk;
}

}  // namespace gpumux
