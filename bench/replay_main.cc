// gpumux_replay_inprocess TRACE.csv.gz [--repeat N] [--max-split-size-mb N]
//                         [--allocator-conf TEXT]
//
// Replays a recorded PyTorch allocation trace through gpumux's caching
// allocator in this process (host backend, one H200-sized device) and prints
// PyTorch's figures and the operation rate.

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "allocator/allocator_config.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kUsage[] =
    "usage: gpumux_replay_inprocess TRACE.csv.gz [--repeat N] [--max-split-size-mb N]\n"
    "                               [--allocator-conf TEXT]\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "gpumux_replay_inprocess: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian builds Abseil with Mutex deadlock detection on, which costs a
  // graph lookup per Lock; a benchmark measures the allocator, not that.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // stdout carries the result lines only; log lines go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("gpumux_replay"));
  std::string trace;
  int repeat = 1;
  std::string conf;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--repeat" || arg == "--max-split-size-mb" || arg == "--allocator-conf") &&
        i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--allocator-conf") {
        conf = value;
      } else if (arg == "--repeat") {
        if (!absl::SimpleAtoi(value, &repeat) || repeat < 1) {
          return Fail(absl::StrCat("--repeat wants a positive integer, got '", value, "'"));
        }
      } else {
        conf = absl::StrCat("max_split_size_mb:", value);
      }
    } else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (trace.empty() && !arg.empty() && arg[0] != '-') {
      trace = arg;
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (trace.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  absl::StatusOr<gpumux::AllocatorOptions> options = gpumux::AllocatorOptions::Parse(conf);
  if (!options.ok()) return Fail(options.status().ToString());
  absl::StatusOr<std::vector<gpumux::TraceEvent>> events = gpumux::LoadTrace(trace);
  if (!events.ok()) return Fail(events.status().ToString());
  absl::StatusOr<std::unique_ptr<gpumux::InProcessTarget>> target =
      gpumux::InProcessTarget::Create(*options);
  if (!target.ok()) return Fail(target.status().ToString());
  absl::StatusOr<gpumux::ReplayResult> result = gpumux::Replay(*events, **target, repeat);
  if (!result.ok()) return Fail(result.status().ToString());
  std::fputs(gpumux::FormatReplayResult(*result).c_str(), stdout);
  return 0;
}
