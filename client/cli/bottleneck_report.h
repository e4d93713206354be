#pragma once

// `gpumux bottleneck`'s report, after torch.utils.bottleneck: the environment,
// the host view (libgpumux's calls in cProfile's pstats layout), the device
// view (the daemon's work in the autograd profiler's key_averages().table()
// layout), NVTX ranges, a verdict by bottleneck's 5% rule and the caveats; the
// same as one JSON object; and a Chrome trace of the whole timeline. Pure
// functions of a Profile: no I/O, thread-safe.

#include <cstdint>
#include <string>

#include "gpumux/common/profile_data.h"

namespace gpumux {

struct ReportOptions {
  int top = 15;                       // rows of the host and device tables (pstats' restriction)
  std::string device_label = "CUDA";  // "CUDA" on the CUDA backend, "Device" on the host backend
};

// Which side bounds the program. host_ns is the wall time less the time spent
// waiting for the device (clamped at 0); device_ns is the union of the
// measured work's [device_start_ns, device_end_ns) intervals on all devices.
// pct_diff = (device_ns - host_ns) / device_ns, 0 when device_ns is 0.
// Bottleneck's rule: no device time is host-bound; |pct_diff| <= 0.05 is
// balanced; otherwise the larger side bounds.
struct Verdict {
  enum class Kind { kHostBound, kDeviceBound, kBalanced };
  int64_t host_ns = 0;
  int64_t device_ns = 0;
  double pct_diff = 0;
  Kind kind = Kind::kHostBound;
};

Verdict ComputeVerdict(const Profile& profile);

// The report for a terminal, sections framed as torch.utils.bottleneck frames
// them. Times read as the autograd profiler prints them ("1.234ms").
std::string FormatBottleneckText(const Profile& profile, const ReportOptions& options);

// The same content as one JSON object (every called function and every device
// row, not only the top ones), ending in a newline.
std::string FormatBottleneckJson(const Profile& profile, const ReportOptions& options);

// The Chrome Trace Event Format ({"traceEvents": [...]}) for chrome://tracing
// or Perfetto: host calls on pid 1 (one thread each), NVTX ranges on pid 2 (one
// track per session), measured device work on pid 100 + device (one track per
// session and stream), unmeasured work as instants on pid 99, and a flow from
// each host call to the device work it queued. Times in microseconds from the
// profile's earliest instant. Ends in a newline.
std::string FormatChromeTrace(const Profile& profile);

}  // namespace gpumux
