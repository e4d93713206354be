// gpumux bottleneck: runs a program with libgpumux's profiler on (a region
// file named by GPUMUX_PROFILE, holding the token of a profile this command's
// session started in the daemon), waits for it, and reports both sides.
// gpumux profile: the same report for a live session over a window.

#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/cli/bottleneck_report.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "client/profile_region.h"
#include "common/base/byte_size.h"
#include "gpumux/admin.h"
#include "gpumux/client.h"
#include "gpumux/observer.h"
#include "gpumux/profiler.h"

namespace gpumux {
namespace {

// `gpumux bottleneck`'s own version and build (client/cli/CMakeLists.txt).
constexpr char kCliVersion[] = GPUMUX_VERSION;
constexpr char kCliCommit[] = GPUMUX_COMMIT;
constexpr char kCliBuildType[] = GPUMUX_BUILD_TYPE;
constexpr char kCliCompiler[] = GPUMUX_COMPILER;

struct ReportFlags {
  int top = 15;
  bool json = false;
  std::string trace;
  uint64_t ring = ProfileRegion::kDefaultCapacity;
};

absl::StatusOr<ReportFlags> ReadReportFlags(const ParsedArgs& parsed) {
  ReportFlags flags;
  absl::StatusOr<int64_t> top = IntFlag(parsed, "top", 15, 1, 10000);
  if (!top.ok()) return top.status();
  flags.top = static_cast<int>(*top);
  absl::StatusOr<int64_t> ring = IntFlag(parsed, "ring", ProfileRegion::kDefaultCapacity, 1,
                                         static_cast<int64_t>(ProfileRegion::kMaxCapacity));
  if (!ring.ok()) return ring.status();
  flags.ring = static_cast<uint64_t>(*ring);
  flags.json = parsed.Has("json");
  flags.trace = parsed.Get("trace").value_or("");
  return flags;
}

std::string OsDescription() {
  std::string os = "unknown";
  std::ifstream release("/etc/os-release");
  for (std::string line; std::getline(release, line);) {
    absl::string_view value = line;
    if (absl::ConsumePrefix(&value, "PRETTY_NAME=")) {
      os = std::string(absl::StripSuffix(absl::StripPrefix(value, "\""), "\""));
    }
  }
  utsname name;
  if (uname(&name) == 0) absl::StrAppend(&os, ", ", name.sysname, " ", name.release);
  return os;
}

std::string CudaVersion(int32_t version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

// The environment summary: this CLI's build, the daemon's, and its devices.
ProfileEnvironment Environment(const CommandContext& context, const std::string& daemon_version,
                               const std::string& daemon_build) {
  ProfileEnvironment env;
  env.gpumux_version = absl::StrCat(kCliVersion, " (commit ", kCliCommit, ")");
  env.build_type = kCliBuildType;
  env.compiler = kCliCompiler;
  env.os = OsDescription();
  env.daemon_version = daemon_version.empty() ? "unknown (asked through the admin socket)"
                       : daemon_build.empty()
                           ? daemon_version
                           : absl::StrCat(daemon_version, " (", daemon_build, ")");
  Observer observer(context.address, context.security);
  absl::StatusOr<std::vector<DeviceProperties>> devices = observer.ListDevices();
  if (!devices.ok()) {
    env.devices.push_back(absl::StrCat("unknown: ", devices.status().message()));
    return env;
  }
  for (const DeviceProperties& d : *devices) {
    env.backend = d.backend;
    std::string line = absl::StrCat(d.index, ": ", d.name, ", ", FormatTorchSize(d.total_memory));
    if (d.driver_version > 0) absl::StrAppend(&line, ", driver ", CudaVersion(d.driver_version));
    if (d.runtime_version > 0) absl::StrAppend(&line, ", runtime ", CudaVersion(d.runtime_version));
    if (!d.collectives.empty()) absl::StrAppend(&line, ", collectives ", d.collectives);
    env.devices.push_back(std::move(line));
  }
  return env;
}

std::string ExitDescription(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return absl::StrCat("killed by signal ", signal, " (", strsignal(signal), ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

int Report(const CommandContext& context, const Profile& profile, const ReportFlags& flags) {
  ReportOptions options;
  options.top = flags.top;
  options.device_label = profile.environment.backend == "cuda" ? "CUDA" : "Device";
  if (!flags.trace.empty()) {
    std::ofstream trace(flags.trace, std::ios::trunc);
    trace << FormatChromeTrace(profile);
    if (!trace.flush()) {
      return ReportError(context, absl::ErrnoToStatus(
                                      errno, absl::StrCat("cannot write the trace ", flags.trace)));
    }
  }
  *context.out << (flags.json ? FormatBottleneckJson(profile, options)
                              : FormatBottleneckText(profile, options));
  return kExitOk;
}

// Runs argv with `env` added to this process's environment; its wait status.
// `output_to_stderr`: the program's stdout goes to this command's stderr
// (--json, whose stdout is the one JSON document).
absl::StatusOr<int> RunProgram(const std::vector<std::string>& argv,
                               const std::vector<std::pair<std::string, std::string>>& env,
                               bool output_to_stderr) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "cannot fork");
  if (pid == 0) {
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    if (output_to_stderr) dup2(STDERR_FILENO, STDOUT_FILENO);
    execvp(args[0], args.data());
    std::fprintf(stderr, "gpumux bottleneck: cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  // The program's terminal signals reach it (same process group); this
  // command waits them out to report.
  std::signal(SIGINT, SIG_IGN);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::ErrnoToStatus(errno, "cannot wait for the program");
  }
  std::signal(SIGINT, SIG_DFL);
  return status;
}

}  // namespace

int RunBottleneck(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed =
      ParseFlags(args, {{"top", true}, {"json", false}, {"trace", true}, {"ring", true}});
  absl::StatusOr<ReportFlags> flags =
      parsed.ok() ? ReadReportFlags(*parsed) : absl::StatusOr<ReportFlags>(parsed.status());
  if (flags.ok() && parsed->positional.empty()) {
    flags = absl::InvalidArgumentError("bottleneck wants a program to run: -- PROGRAM [ARGS...]");
  }
  if (!flags.ok()) return UsageError(context, flags.status().message(), kBottleneckUsage);

  // The daemon's side: a profile of this command's session, which the
  // program's sessions join with its token.
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(
      context.address, {.client_name = "gpumux bottleneck", .security = context.security});
  if (!client.ok()) return ReportError(context, client.status());
  absl::StatusOr<profiler::StartedProfile> started = profiler::Start(*(*client), flags->ring);
  if (!started.ok()) return ReportError(context, started.status());

  char pattern[] = "/tmp/gpumux-bottleneck-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    return ReportError(context, absl::ErrnoToStatus(errno, "cannot make a temporary directory"));
  }
  const std::string dir = pattern;
  const std::string region = dir + "/profile";
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};
  if (absl::Status made = ProfileRegion::CreateFile(region, flags->ring, started->token);
      !made.ok()) {
    return ReportError(context, made);
  }

  Profile profile;
  profile.program = absl::StrJoin(parsed->positional, " ");
  const int64_t start_ns = MonotonicNanos();
  absl::StatusOr<int> status =
      RunProgram(parsed->positional,
                 {{"GPUMUX_PROFILE", region}, {"GPUMUX_ADDRESS", context.address}}, flags->json);
  const int64_t end_ns = MonotonicNanos();
  if (!status.ok()) return ReportError(context, status.status());
  profile.exit = ExitDescription(*status);
  profile.wall_ns = end_ns - start_ns;

  absl::StatusOr<HostProfile> host = ReadProfileFile(region);
  if (!host.ok()) return ReportError(context, host.status());
  profile.host = *std::move(host);
  // A program that exited normally marked its end; one that crashed did not,
  // and its last call is as far as its side goes.
  profile.host.start_ns = start_ns;
  if (profile.host.end_ns < start_ns || profile.host.end_ns > end_ns) profile.host.end_ns = end_ns;
  absl::StatusOr<DeviceProfile> device = profiler::Finish(*(*client), started->id);
  if (!device.ok()) return ReportError(context, device.status());
  profile.device = *std::move(device);
  profile.environment =
      Environment(context, (*client)->daemon_version(), (*client)->daemon_build());
  return Report(context, profile, *flags);
}

int RunProfile(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {{"session", true},
                                                        {"duration", true},
                                                        {"top", true},
                                                        {"json", false},
                                                        {"trace", true},
                                                        {"ring", true}});
  absl::StatusOr<ReportFlags> flags =
      parsed.ok() ? ReadReportFlags(*parsed) : absl::StatusOr<ReportFlags>(parsed.status());
  absl::StatusOr<uint64_t> session =
      flags.ok() ? UintFlag(*parsed, "session", 0) : absl::StatusOr<uint64_t>(flags.status());
  double seconds = 0;
  absl::Status status = session.status();
  if (status.ok() && *session == 0) status = absl::InvalidArgumentError("--session ID is required");
  if (status.ok()) {
    const std::optional<std::string> duration = parsed->Get("duration");
    if (!duration.has_value() || !absl::SimpleAtod(*duration, &seconds) || !(seconds >= 0.001) ||
        seconds > 3600) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "--duration wants seconds in [0.001, 3600], got '", duration.value_or(""), "'"));
    }
  }
  if (status.ok() && !parsed->positional.empty()) {
    status =
        absl::InvalidArgumentError(absl::StrCat("unexpected argument ", parsed->positional[0]));
  }
  if (!status.ok()) return UsageError(context, status.message(), kProfileUsage);

  // An administrator profiles any session (the admin socket); anyone else
  // sessions of their own tenant, through a session of theirs.
  const absl::Duration window = absl::Seconds(seconds);
  std::string daemon_version;
  std::string daemon_build;
  absl::StatusOr<SessionProfile> live =
      Admin(context.address).ProfileSession(SessionId(*session), window, flags->ring);
  const bool not_unix = absl::IsInvalidArgument(live.status()) &&
                        absl::StrContains(live.status().message(), "is not a Unix socket");
  if (absl::IsPermissionDenied(live.status()) || absl::IsUnavailable(live.status()) || not_unix) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(
        context.address, {.client_name = "gpumux profile", .security = context.security});
    if (!client.ok()) return ReportError(context, client.status());
    live = profiler::ProfileSession(*(*client), SessionId(*session), window, flags->ring);
    daemon_version = (*client)->daemon_version();
    daemon_build = (*client)->daemon_build();
  }
  if (!live.ok()) return ReportError(context, live.status());

  Profile profile;
  profile.program = absl::StrCat("session ", *session);
  profile.wall_ns = live->end_ns - live->start_ns;
  profile.device = std::move(live->device);
  if (live->host.has_value()) {
    profile.host = *std::move(live->host);
  } else {
    profile.host.start_ns = live->start_ns;
    profile.host.end_ns = live->end_ns;
    profile.exit = absl::StrCat("host side missing: ", live->host_missing);
  }
  profile.environment = Environment(context, daemon_version, daemon_build);
  return Report(context, profile, *flags);
}

}  // namespace gpumux
