// The fast path's figure: both traces of testdata/ replayed in-process (the
// allocator alone, over addresses), through a client in local allocation
// mode over a real gpumuxd (the same allocator in the client, over leased
// segments), and through a client in daemon mode (an RPC per call), side by
// side in one run. Each target replays the trace once to warm up (local and
// daemon modes lease or obtain their segments then, and the daemon zeroes
// them), then `--repeat` more times, timed; peaks are from the warm-up.
//
// usage: gpumux_replay_modes_bench [--gpumuxd PATH] [--repeat N] [--daemon-repeat N]
// Prints name=value lines per trace (resnet50, gpt2s): *_inprocess_ops_per_second,
// *_local_ops_per_second, *_daemon_ops_per_second, *_replay_local_over_inprocess,
// *_peaks_match (1 when requested, allocated and reserved peaks agree in all
// three), and replay_local_over_inprocess (the smaller of the two).

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "gpumux/client.h"
#include "replay/client_target.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"

namespace {

struct Flags {
  std::string gpumuxd;
  int repeat = 20;
  int daemon_repeat = 1;
};

struct Run {
  double ops_per_second = 0;
  gpumux::ReplayResult warm;
};

absl::StatusOr<Run> Measure(const std::vector<gpumux::TraceEvent>& events,
                            gpumux::ReplayTarget& target, int repeat) {
  Run run;
  absl::StatusOr<gpumux::ReplayResult> warm = gpumux::Replay(events, target, 1);
  if (!warm.ok()) return warm.status();
  run.warm = *warm;
  absl::StatusOr<gpumux::ReplayResult> timed = gpumux::Replay(events, target, repeat);
  if (!timed.ok()) return timed.status();
  run.ops_per_second = static_cast<double>(timed->operations) / timed->seconds;
  return run;
}

bool SamePeaks(const gpumux::ReplayResult& a, const gpumux::ReplayResult& b) {
  return a.peak_requested == b.peak_requested && a.peak_allocated == b.peak_allocated &&
         a.peak_reserved == b.peak_reserved;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  absl::Status parsed = gpumux::bench::ParseBenchFlags(argc, argv,
                                                       {{"gpumuxd", &flags.gpumuxd},
                                                        {"repeat", &flags.repeat},
                                                        {"daemon-repeat", &flags.daemon_repeat}});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\nusage: %s [--gpumuxd PATH] [--repeat N] [--daemon-repeat N]\n",
                 std::string(parsed.message()).c_str(), argv[0]);
    return 2;
  }
  // An H200's memory per emulated device, as the in-process target has.
  gpumux::bench::BenchDaemon daemon(
      flags.gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : flags.gpumuxd,
      {"--host-device-memory=141GiB", "--host-devices=1"});
  double worst = std::numeric_limits<double>::infinity();
  for (const auto& [name, path] : std::vector<std::pair<std::string, std::string>>{
           {"resnet50", GPUMUX_SOURCE_DIR "/testdata/trace_resnet50_train_b64.csv.gz"},
           {"gpt2s", GPUMUX_SOURCE_DIR "/testdata/trace_gpt2s_train_b8_s1024.csv.gz"}}) {
    absl::StatusOr<std::vector<gpumux::TraceEvent>> events = gpumux::LoadTrace(path);
    auto inprocess = gpumux::InProcessTarget::Create(gpumux::AllocatorOptions());
    if (!events.ok() || !inprocess.ok()) {
      std::fprintf(stderr, "gpumux_replay_modes_bench: cannot set up %s\n", name.c_str());
      return 1;
    }
    absl::StatusOr<Run> a = Measure(*events, **inprocess, flags.repeat);
    // One session at a time: each holds the trace's peak of host memory.
    auto through = [&](gpumux::AllocationMode mode, int repeat) -> absl::StatusOr<Run> {
      auto client =
          gpumux::Client::Connect(daemon.address(), {.client_name = "replay", .allocation = mode});
      if (!client.ok()) return client.status();
      gpumux::ClientReplayTarget target(**client, gpumux::DeviceIndex(0));
      return Measure(*events, target, repeat);
    };
    absl::StatusOr<Run> b = through(gpumux::AllocationMode::kLocal, flags.repeat);
    absl::StatusOr<Run> c = through(gpumux::AllocationMode::kDaemon, flags.daemon_repeat);
    if (!a.ok() || !b.ok() || !c.ok()) {
      std::fprintf(stderr, "gpumux_replay_modes_bench: %s: %s\n", name.c_str(),
                   (!a.ok()   ? a.status()
                    : !b.ok() ? b.status()
                              : c.status())
                       .ToString()
                       .c_str());
      return 1;
    }
    const double ratio = b->ops_per_second / a->ops_per_second;
    worst = std::min(worst, ratio);
    std::printf("%s_inprocess_ops_per_second=%.0f\n", name.c_str(), a->ops_per_second);
    std::printf("%s_local_ops_per_second=%.0f\n", name.c_str(), b->ops_per_second);
    std::printf("%s_daemon_ops_per_second=%.0f\n", name.c_str(), c->ops_per_second);
    std::printf("%s_replay_local_over_inprocess=%.3f\n", name.c_str(), ratio);
    std::printf("%s_replay_daemon_over_inprocess=%.4f\n", name.c_str(),
                c->ops_per_second / a->ops_per_second);
    std::printf("%s_peak_reserved=%llu\n", name.c_str(),
                static_cast<unsigned long long>(b->warm.peak_reserved));
    std::printf("%s_peaks_match=%d\n", name.c_str(),
                SamePeaks(a->warm, b->warm) && SamePeaks(a->warm, c->warm) ? 1 : 0);
  }
  std::printf("replay_local_over_inprocess=%.3f\n", worst);
  return 0;
}
