#include "client/cli/cli.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "gpumux/common/default_address.h"

namespace gpumux {
namespace {

struct Command {
  const char* name;
  int (*run)(const CommandContext&, const std::vector<std::string>&);
  const char* usage;
};

constexpr Command kCommands[] = {
    {"devices", RunDevices, kDevicesUsage},    {"stats", RunStats, kStatsUsage},
    {"summary", RunSummary, kSummaryUsage},    {"snapshot", RunSnapshot, kSnapshotUsage},
    {"sessions", RunSessions, kSessionsUsage}, {"empty-cache", RunEmptyCache, kEmptyCacheUsage},
    {"tenants", RunTenants, kTenantsUsage},    {"tenant-limit", RunTenantLimit, kTenantLimitUsage},
    {"replay", RunReplay, kReplayUsage},       {"kill-session", RunKillSession, kKillSessionUsage},
    {"health", RunHealth, kHealthUsage},       {"top", RunTop, kTopUsage},
    {"groups", RunGroups, kGroupsUsage},       {"bottleneck", RunBottleneck, kBottleneckUsage},
    {"profile", RunProfile, kProfileUsage},
};

bool AsksForHelp(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace

const std::string& CliUsage() {
  static const std::string* usage = new std::string(absl::StrCat(
      "usage: gpumux [--address ADDRESS] [TLS FLAGS] COMMAND [FLAGS]\n"
      "\n"
      "ADDRESS is unix:///PATH, /PATH or HOST:PORT (default: $GPUMUX_ADDRESS, else ",
      DefaultAddress(),
      ").\n"
      "TLS flags, for a HOST:PORT (each defaults to its variable; TLS when a CA is given):\n"
      "  --tls-ca FILE (GPUMUX_TLS_CA)  CA certificates that verify gpumuxd\n"
      "  --tls-cert FILE, --tls-key FILE (GPUMUX_TLS_CERT, GPUMUX_TLS_KEY)  this client's\n"
      "      certificate and key, for a daemon that requires them (mutual TLS)\n"
      "  --auth-token-file FILE (GPUMUX_AUTH_TOKEN_FILE)  the daemon's bearer token\n"
      "  --tls-server-name NAME (GPUMUX_TLS_SERVER_NAME)  the name gpumuxd's certificate\n"
      "      is checked against, when it does not name the address\n"
      "Tables by default; --json where offered prints JSON for machines.\n"
      "\n"
      "commands:\n  ",
      kDevicesUsage, "  ", kStatsUsage, "  ", kSummaryUsage, "  ", kSnapshotUsage, "  ",
      kSessionsUsage, "  ", kGroupsUsage, "  ", kEmptyCacheUsage, "  ", kTenantsUsage, "  ",
      kTenantLimitUsage, "  ", kKillSessionUsage, "  ", kHealthUsage, "  ", kTopUsage, "  ",
      kBottleneckUsage,
      "      (the program runs with GPUMUX_PROFILE and GPUMUX_ADDRESS set; its libgpumux\n"
      "      calls and the daemon's work for it are reported when it exits)\n  ",
      kProfileUsage, "  ", kReplayUsage,
      "      (without --address: in this process; with it: as a client of that daemon,\n"
      "      allocating locally over its leases unless GPUMUX_ALLOCATION=daemon)\n"));
  return *usage;
}

int RunCli(std::vector<std::string> args, std::ostream& out, std::ostream& err) {
  CommandContext context;
  context.out = &out;
  context.err = &err;
  absl::StatusOr<std::optional<std::string>> address = ExtractFlag(args, "address");
  if (!address.ok()) return UsageError(context, address.status().message(), CliUsage());
  context.address_given = address->has_value();
  context.address = context.address_given ? **address : DefaultAddress();
  if (context.address_given && context.address.empty()) {
    return UsageError(context, "--address needs a value", CliUsage());
  }
  for (auto [flag, field] : {std::pair{"tls-ca", &ChannelSecurity::tls_ca_file},
                             {"tls-cert", &ChannelSecurity::tls_cert_file},
                             {"tls-key", &ChannelSecurity::tls_key_file},
                             {"auth-token-file", &ChannelSecurity::auth_token_file},
                             {"tls-server-name", &ChannelSecurity::tls_server_name}}) {
    absl::StatusOr<std::optional<std::string>> value = ExtractFlag(args, flag);
    if (!value.ok()) return UsageError(context, value.status().message(), CliUsage());
    if (!value->has_value()) continue;
    if ((*value)->empty()) {
      return UsageError(context, absl::StrCat("--", flag, " needs a value"), CliUsage());
    }
    context.security.*field = **value;
  }

  if (args.empty()) return UsageError(context, "no command given", CliUsage());
  const std::string name = args.front();
  if (name == "help" || name == "--help" || name == "-h") {
    out << CliUsage();
    return kExitOk;
  }
  args.erase(args.begin());
  for (const Command& command : kCommands) {
    if (name != command.name) continue;
    if (AsksForHelp(args)) {  // `gpumux stats --help`: that command's usage, to stdout
      out << "usage: " << command.usage;
      return kExitOk;
    }
    return command.run(context, args);
  }
  return UsageError(
      context, absl::StrCat(name.rfind('-', 0) == 0 ? "unknown flag " : "unknown command ", name),
      CliUsage());
}

}  // namespace gpumux
