// What profiling costs a program: both traces of testdata/ replayed through
// a client over a real gpumuxd, in local and in daemon allocation mode, as a
// plain child process and as the same child under `gpumux bottleneck`
// (GPUMUX_PROFILE on: every API call recorded into the profile region, the
// session's work recorded by the daemon), alternating, side by side in one
// run. Each child replays the trace once to warm up, then `--repeat` times
// (`--daemon-repeat` in daemon mode), each pass timed on its own, and
// prints the ops/s of its fastest pass; each pair runs `--rounds` times
// (`--daemon-rounds`): the ratio is the median of the rounds' ratios (the
// two sides of a round run one after the other, so they share the
// machine's state, which drifts over a minute), and the ops/s printed are
// each side's best.
//
// usage: gpumux_profile_bench [--gpumuxd PATH] [--gpumux PATH] [--repeat N]
//                             [--daemon-repeat N] [--rounds N] [--daemon-rounds N]
// Prints name=value lines per trace and mode (resnet50_local, ...):
// *_off_ops_per_second, *_on_ops_per_second, *_on_over_off; and
// profile_on_over_off_local and profile_on_over_off_daemon (the smaller of
// the two traces'). A daemon-mode pass runs ~13 k RPCs/s on two cores, and
// its scheduling varies by several percent between passes, more than the
// profiler costs it; so the bench also prints what a recorded call costs
// (profile_recorded_call_ns: the larger of the traces' local-mode per-op
// difference) and the daemon-mode ratio that cost alone gives
// (profile_on_over_off_daemon_from_call_cost, at the slower trace's rate).
//
// Its child: gpumux_profile_bench --child ADDRESS TRACE MODE REPEAT.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "gpumux/client.h"
#include "replay/client_target.h"
#include "replay/trace_replay.h"

namespace {

struct Flags {
  std::string gpumuxd;
  std::string gpumux;
  int repeat = 10;
  int daemon_repeat = 3;
  int rounds = 3;
  int daemon_rounds = 14;
};

// The child: replays TRACE through a client in MODE and prints
// ops_per_second=N.
int RunChild(const std::string& address, const std::string& trace, const std::string& mode,
             int repeat) {
  absl::StatusOr<std::vector<gpumux::TraceEvent>> events = gpumux::LoadTrace(trace);
  if (!events.ok()) {
    std::fprintf(stderr, "child: %s\n", events.status().ToString().c_str());
    return 1;
  }
  auto client = gpumux::Client::Connect(
      address, {.client_name = "profile-bench",
                .allocation = mode == "local" ? gpumux::AllocationMode::kLocal
                                              : gpumux::AllocationMode::kDaemon});
  if (!client.ok()) {
    std::fprintf(stderr, "child: %s\n", client.status().ToString().c_str());
    return 1;
  }
  gpumux::ClientReplayTarget target(**client, gpumux::DeviceIndex(0));
  double best = 0;
  for (int pass = 0; pass <= repeat; ++pass) {  // pass 0 warms up
    absl::StatusOr<gpumux::ReplayResult> timed = gpumux::Replay(*events, target, 1);
    if (!timed.ok()) {
      std::fprintf(stderr, "child: %s\n", timed.status().ToString().c_str());
      return 1;
    }
    if (pass > 0) best = std::max(best, static_cast<double>(timed->operations) / timed->seconds);
  }
  std::printf("ops_per_second=%.0f\n", best);
  return 0;
}

// Runs `command` through the shell and returns the ops_per_second its child
// printed (-1 when it printed none or failed).
double RunAndRead(const std::string& command) {
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return -1;
  double ops = -1;
  char line[4096];
  while (std::fgets(line, sizeof(line), out) != nullptr) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    constexpr char kKey[] = "ops_per_second=";
    if (text.rfind(kKey, 0) == 0 && !absl::SimpleAtod(text.substr(sizeof(kKey) - 1), &ops)) {
      ops = -1;
    }
  }
  const int status = pclose(out);
  return status == 0 ? ops : -1;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--child") {
    int repeat = 0;
    if (!absl::SimpleAtoi(argv[5], &repeat) || repeat < 1) return 2;
    return RunChild(argv[2], argv[3], argv[4], repeat);
  }
  Flags flags;
  absl::Status parsed =
      gpumux::bench::ParseBenchFlags(argc, argv,
                                     {{"gpumuxd", &flags.gpumuxd},
                                      {"gpumux", &flags.gpumux},
                                      {"repeat", &flags.repeat, 1},
                                      {"daemon-repeat", &flags.daemon_repeat, 1},
                                      {"rounds", &flags.rounds, 1},
                                      {"daemon-rounds", &flags.daemon_rounds, 1}});
  if (!parsed.ok()) {
    std::fprintf(stderr,
                 "%s\nusage: %s [--gpumuxd PATH] [--gpumux PATH] [--repeat N] "
                 "[--daemon-repeat N] [--rounds N] [--daemon-rounds N]\n",
                 std::string(parsed.message()).c_str(), argv[0]);
    return 2;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cli =
      flags.gpumux.empty() ? gpumux::bench::ToolPath("gpumux", "client/cli") : flags.gpumux;
  // An H200's memory per emulated device, as the replay benchmarks have.
  gpumux::bench::BenchDaemon daemon(
      flags.gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : flags.gpumuxd,
      {"--host-device-memory=141GiB", "--host-devices=1"});
  double call_ns = 0;
  double daemon_slowest_ops = std::numeric_limits<double>::infinity();
  for (const std::string mode : {"local", "daemon"}) {
    double worst = std::numeric_limits<double>::infinity();
    for (const auto& [name, path] : std::vector<std::pair<std::string, std::string>>{
             {"resnet50", GPUMUX_SOURCE_DIR "/testdata/trace_resnet50_train_b64.csv.gz"},
             {"gpt2s", GPUMUX_SOURCE_DIR "/testdata/trace_gpt2s_train_b8_s1024.csv.gz"}}) {
      const int repeat = mode == "local" ? flags.repeat : flags.daemon_repeat;
      const int rounds = mode == "local" ? flags.rounds : flags.daemon_rounds;
      const std::string child = absl::StrCat(Quote(self), " --child ", Quote(daemon.address()), " ",
                                             Quote(path), " ", mode, " ", repeat);
      // The child's figure is read from among the text report's lines (under
      // --json its output would go to stderr).
      const std::string profiled = absl::StrCat(Quote(cli), " --address ", Quote(daemon.address()),
                                                " bottleneck --top 1 -- ", child, " 2>/dev/null");
      double off = 0, on = 0;
      std::vector<double> ratios;  // each round's, profiled over plain
      for (int round = 0; round < rounds; ++round) {
        // Each side goes first in every other round: a session that
        // follows another may find the daemon's memory warmer.
        double a, b;
        if (round % 2 == 0) {
          a = RunAndRead(child + " 2>/dev/null");
          b = RunAndRead(profiled);
        } else {
          b = RunAndRead(profiled);
          a = RunAndRead(child + " 2>/dev/null");
        }
        if (a < 0 || b < 0) {
          std::fprintf(stderr, "gpumux_profile_bench: %s %s: a run failed (%s)\n", name.c_str(),
                       mode.c_str(), a < 0 ? "unprofiled" : "under gpumux bottleneck");
          return 1;
        }
        off = std::max(off, a);
        on = std::max(on, b);
        ratios.push_back(b / a);
      }
      std::sort(ratios.begin(), ratios.end());
      const double ratio = ratios.size() % 2 == 1
                               ? ratios[ratios.size() / 2]
                               : (ratios[ratios.size() / 2 - 1] + ratios[ratios.size() / 2]) / 2;
      const std::string key = absl::StrCat(name, "_", mode);
      std::printf("%s_off_ops_per_second=%.0f\n", key.c_str(), off);
      std::printf("%s_on_ops_per_second=%.0f\n", key.c_str(), on);
      std::printf("%s_on_over_off=%.3f\n", key.c_str(), ratio);
      worst = std::min(worst, ratio);
      if (mode == "local") call_ns = std::max(call_ns, 1e9 / on - 1e9 / off);
      if (mode == "daemon") daemon_slowest_ops = std::min(daemon_slowest_ops, off);
    }
    std::printf("profile_on_over_off_%s=%.3f\n", mode.c_str(), worst);
  }
  std::printf("profile_recorded_call_ns=%.1f\n", call_ns);
  std::printf("profile_on_over_off_daemon_from_call_cost=%.4f\n",
              1 / (1 + call_ns * daemon_slowest_ops / 1e9));
  return 0;
}
