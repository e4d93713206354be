#include "client/cli/top_view.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/text_table.h"
#include "common/base/byte_size.h"
#include "common/base/kubernetes_labels.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

constexpr int kBarWidth = 40;

uint64_t Sum(const SessionInfo& session, uint64_t SessionDeviceUsage::*field) {
  uint64_t total = 0;
  for (const SessionDeviceUsage& usage : session.devices) total += usage.*field;
  return total;
}

uint64_t SortKey(const SessionInfo& session, TopSort sort) {
  switch (sort) {
    case TopSort::kAllocated:
      return Sum(session, &SessionDeviceUsage::allocated_bytes);
    case TopSort::kReserved:
      return Sum(session, &SessionDeviceUsage::reserved_bytes);
    case TopSort::kPeak:
      return Sum(session, &SessionDeviceUsage::peak_allocated_bytes);
    case TopSort::kSessionId:
      return session.session_id.value();
  }
  return 0;
}

// "[####====      ]": allocated '#', reserved but free '=', the rest of the
// device's total ' ', and what others use of it (total - free - reserved,
// another process on a CUDA device) '-'.
std::string Bar(const TopDevice& device) {
  const uint64_t total = std::max<uint64_t>(device.properties.total_memory, 1);
  const uint64_t used = device.properties.total_memory -
                        std::min(device.properties.free_memory, device.properties.total_memory);
  auto cells = [&](uint64_t bytes) {
    return static_cast<int>(std::min<uint64_t>(bytes, total) * kBarWidth / total);
  };
  const int allocated = cells(device.allocated_bytes);
  const int reserved = std::max(cells(device.reserved_bytes), allocated);
  const int in_use = std::max(cells(used), reserved);
  return absl::StrCat("[", std::string(allocated, '#'), std::string(reserved - allocated, '='),
                      std::string(in_use - reserved, '-'), std::string(kBarWidth - in_use, ' '),
                      "]");
}

std::string Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * part / whole);
}

}  // namespace

const char* TopSortName(TopSort sort) {
  switch (sort) {
    case TopSort::kAllocated:
      return "allocated";
    case TopSort::kReserved:
      return "reserved";
    case TopSort::kPeak:
      return "peak";
    case TopSort::kSessionId:
      return "session id";
  }
  return "?";
}

TopSort NextTopSort(TopSort sort) {
  switch (sort) {
    case TopSort::kAllocated:
      return TopSort::kReserved;
    case TopSort::kReserved:
      return TopSort::kPeak;
    case TopSort::kPeak:
      return TopSort::kSessionId;
    case TopSort::kSessionId:
      return TopSort::kAllocated;
  }
  return TopSort::kAllocated;
}

absl::StatusOr<TopSample> TakeTopSample(Observer& observer) {
  TopSample sample;
  GPUMUX_ASSIGN_OR_RETURN(std::vector<DeviceProperties> devices, observer.ListDevices());
  for (DeviceProperties& properties : devices) {
    using Stats = std::map<std::string, int64_t>;
    GPUMUX_ASSIGN_OR_RETURN(Stats stats, observer.MemoryStats(DeviceIndex(properties.index)));
    TopDevice& device = sample.devices.emplace_back();
    device.properties = std::move(properties);
    device.allocated_bytes = static_cast<uint64_t>(stats["allocated_bytes.all.current"]);
    device.reserved_bytes = static_cast<uint64_t>(stats["reserved_bytes.all.current"]);
  }
  GPUMUX_ASSIGN_OR_RETURN(sample.sessions, observer.ListSessions());
  return sample;
}

std::string PodOf(const SessionInfo& session) {
  // The same keys as /metrics reads (common/base/kubernetes_labels.h).
  const KubernetesIdentity k8s = KubernetesIdentityOf(session.labels);
  if (k8s.pod.empty()) return "-";
  return k8s.pod_namespace.empty() ? k8s.pod : absl::StrCat(k8s.pod_namespace, "/", k8s.pod);
}

void SortSessions(std::vector<SessionInfo>& sessions, TopSort sort) {
  std::stable_sort(sessions.begin(), sessions.end(),
                   [sort](const SessionInfo& a, const SessionInfo& b) {
                     if (sort != TopSort::kSessionId) {
                       const uint64_t ka = SortKey(a, sort), kb = SortKey(b, sort);
                       if (ka != kb) return ka > kb;
                     }
                     return a.session_id.value() < b.session_id.value();
                   });
}

TopFrame FormatTopFrame(const absl::StatusOr<TopSample>& sample, const TopFrameOptions& options) {
  TopFrame frame;
  std::vector<std::string>& lines = frame.lines;
  lines.push_back(absl::StrCat("gpumux top - ", options.address, " - ", options.clock, " - every ",
                               absl::StrFormat("%g", options.interval_seconds),
                               "s - sort: ", TopSortName(options.sort)));
  if (options.interactive) {
    lines.push_back(
        "keys: s cycles the sort (allocated, reserved, peak, session id); a, r, p, i pick it; "
        "q quits");
  }
  lines.emplace_back();
  if (!sample.ok()) {
    lines.push_back(absl::StrCat("error: ", sample.status().message()));
    lines.push_back(
        absl::StrCat("retrying every ", absl::StrFormat("%g", options.interval_seconds), "s"));
  } else {
    for (const TopDevice& device : sample->devices) {
      const DeviceProperties& p = device.properties;
      const uint64_t used = p.total_memory - std::min(p.free_memory, p.total_memory);
      lines.push_back(absl::StrCat("GPU ", p.index, "  ", p.name, " (", p.backend, ")",
                                   p.healthy ? "" : absl::StrCat("  UNHEALTHY: ", p.health)));
      lines.push_back(absl::StrCat(
          "  ", Bar(device), "  allocated ", FormatTorchSize(device.allocated_bytes), "  reserved ",
          FormatTorchSize(device.reserved_bytes), "  used ", FormatTorchSize(used), " / ",
          FormatTorchSize(p.total_memory), " (", Percent(used, p.total_memory), ")"));
    }
    lines.push_back("  # allocated  = reserved, free in caches  - used by others");
    lines.emplace_back();
    std::vector<SessionInfo> sessions = sample->sessions;
    SortSessions(sessions, options.sort);
    TextTable table(
        {"SESSION", "CLIENT", "PID", "TENANT", "POD", "ALLOCATED", "RESERVED", "PEAK", "STREAMS"});
    for (size_t column : {0, 2, 5, 6, 7, 8}) table.AlignRight(column);
    for (const SessionInfo& s : sessions) {
      table.AddRow({absl::StrCat(s.session_id.value()), s.client_name, absl::StrCat(s.pid),
                    s.tenant.empty() ? "-" : s.tenant, PodOf(s),
                    FormatTorchSize(Sum(s, &SessionDeviceUsage::allocated_bytes)),
                    FormatTorchSize(Sum(s, &SessionDeviceUsage::reserved_bytes)),
                    FormatTorchSize(Sum(s, &SessionDeviceUsage::peak_allocated_bytes)),
                    absl::StrCat(s.streams)});
    }
    const std::string rendered = table.Render();
    frame.column_header = static_cast<int>(lines.size());
    size_t start = 0;
    while (start < rendered.size()) {
      const size_t end = rendered.find('\n', start);
      lines.push_back(rendered.substr(start, end - start));
      start = end + 1;
    }
    lines.push_back(absl::StrCat(sessions.size(), sessions.size() == 1 ? " session" : " sessions",
                                 "; figures summed over devices (PEAK: allocated_bytes.all.peak)"));
  }
  if (options.width > 0) {
    for (std::string& line : lines) {
      if (line.size() > static_cast<size_t>(options.width)) line.resize(options.width);
    }
  }
  return frame;
}

}  // namespace gpumux
