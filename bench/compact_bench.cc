// Compact mode's figures: every trace of testdata/ replayed in-process
// through gpumux's allocator in PyTorch's default mode, in PyTorch's
// expandable_segments mode and in gpumux's compact mode, side by side in one
// run, next to what PyTorch itself measured on the H200 for its default and
// expandable modes (../shared/traces/README.md; the variable-length
// workload is ours, so PyTorch has no figures of its own for it).
//
// usage: gpumux_compact_bench [--repeat N]
// Prints name=value lines per trace (resnet50, gpt2s, varlen) and mode
// (default, expandable, compact): *_reserved_over_requested at peak, the
// peaks allocated and reserved,
// *_ops_per_second (replays after one warm-up), *_page_maps and
// *_page_unmaps (num_device_alloc / num_device_free of round one),
// *_steady_page_maps_per_round and *_steady_page_unmaps_per_round (the
// timed rounds'), then
// *_compact_over_default_ops and compact_worst_reserved_over_requested.

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "bench/bench_flags.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"

namespace {

struct Trace {
  const char* name;
  const char* file;
  // PyTorch 2.11 on the H200, reserved / requested at peak; 0: none.
  double pytorch_default;
  double pytorch_expandable;
};

constexpr Trace kTraces[] = {
    {"resnet50", "trace_resnet50_train_b64.csv.gz", 1.2327, 1.0146},
    {"gpt2s", "trace_gpt2s_train_b8_s1024.csv.gz", 1.0159, 1.0104},
    {"varlen", "trace_gpt2s_infer_varlen.csv.gz", 0, 0},
};

struct Mode {
  const char* name;
  const char* conf;
};

constexpr Mode kModes[] = {
    {"default", ""},
    {"expandable", "expandable_segments:True"},
    {"compact", "compact_segments:True"},
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "gpumux_compact_bench: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  absl::Status parsed = gpumux::bench::ParseBenchFlags(argc, argv, {{"repeat", &repeat}});
  if (!parsed.ok() || repeat < 1) {
    std::fprintf(stderr, "%s\nusage: %s [--repeat N]\n", std::string(parsed.message()).c_str(),
                 argv[0]);
    return 2;
  }
  double worst_compact = 0;
  for (const Trace& trace : kTraces) {
    absl::StatusOr<std::vector<gpumux::TraceEvent>> events =
        gpumux::LoadTrace(std::string(GPUMUX_SOURCE_DIR) + "/testdata/" + trace.file);
    if (!events.ok()) return Fail(events.status().ToString());
    if (trace.pytorch_default > 0) {
      std::printf("%s_pytorch_default_reserved_over_requested=%.4f\n", trace.name,
                  trace.pytorch_default);
      std::printf("%s_pytorch_expandable_reserved_over_requested=%.4f\n", trace.name,
                  trace.pytorch_expandable);
    }
    double default_ops = 0;
    for (const Mode& mode : kModes) {
      absl::StatusOr<gpumux::AllocatorOptions> options = gpumux::AllocatorOptions::Parse(mode.conf);
      if (!options.ok()) return Fail(options.status().ToString());
      // A fresh allocator per mode: round one starts from an empty cache.
      absl::StatusOr<std::unique_ptr<gpumux::InProcessTarget>> target =
          gpumux::InProcessTarget::Create(*options);
      if (!target.ok()) return Fail(target.status().ToString());
      absl::StatusOr<gpumux::ReplayResult> first = gpumux::Replay(*events, **target, 1);
      if (!first.ok()) return Fail(first.status().ToString());
      absl::StatusOr<gpumux::ReplayResult> timed = gpumux::Replay(*events, **target, repeat);
      if (!timed.ok()) return Fail(timed.status().ToString());
      // Page traffic in steady state: the timed rounds' maps and unmaps,
      // per round (the allocator's counters are cumulative).
      absl::StatusOr<std::map<std::string, int64_t>> after = (*target)->Stats();
      if (!after.ok()) return Fail(after.status().ToString());
      const double rounds = static_cast<double>(repeat);
      const double steady_maps =
          static_cast<double>(after->at("num_device_alloc") - first->device_allocs) / rounds;
      const double steady_unmaps =
          static_cast<double>(after->at("num_device_free") - first->device_frees) / rounds;
      const double ratio =
          static_cast<double>(first->peak_reserved) / static_cast<double>(first->peak_requested);
      const double ops = static_cast<double>(timed->operations) / timed->seconds;
      std::printf("%s_%s_reserved_over_requested=%.4f\n", trace.name, mode.name, ratio);
      std::printf("%s_%s_peak_allocated=%lld\n", trace.name, mode.name,
                  static_cast<long long>(first->peak_allocated));
      std::printf("%s_%s_peak_reserved=%lld\n", trace.name, mode.name,
                  static_cast<long long>(first->peak_reserved));
      std::printf("%s_%s_ops_per_second=%.0f\n", trace.name, mode.name, ops);
      std::printf("%s_%s_page_maps=%lld\n", trace.name, mode.name,
                  static_cast<long long>(first->device_allocs));
      std::printf("%s_%s_page_unmaps=%lld\n", trace.name, mode.name,
                  static_cast<long long>(first->device_frees));
      std::printf("%s_%s_steady_page_maps_per_round=%.1f\n", trace.name, mode.name, steady_maps);
      std::printf("%s_%s_steady_page_unmaps_per_round=%.1f\n", trace.name, mode.name,
                  steady_unmaps);
      if (std::string(mode.name) == "default") {
        default_ops = ops;
        std::printf("%s_peak_requested=%lld\n", trace.name,
                    static_cast<long long>(first->peak_requested));
      }
      if (std::string(mode.name) == "compact") {
        std::printf("%s_compact_over_default_ops=%.3f\n", trace.name, ops / default_ops);
        worst_compact = std::max(worst_compact, ratio);
      }
    }
  }
  std::printf("compact_worst_reserved_over_requested=%.4f\n", worst_compact);
  return 0;
}
