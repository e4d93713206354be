#include "server/http/metrics_page.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/kubernetes_labels.h"
#include "common/formats/memory_stats.h"
#include "server/core/session_overview.h"

namespace gpumux {
namespace {

using Label = PrometheusText::Label;
using Type = PrometheusText::Type;

struct DeviceRow {
  std::string gpu;
  const DeviceInfo* info = nullptr;
  std::optional<uint64_t> free;
  DeviceStats stats;
  bool healthy = false;
};

// One session's label values; the Labels point into it.
struct SessionRow {
  std::string id;
  KubernetesIdentity k8s;
  const SessionOverview* overview = nullptr;
};

std::vector<Label> SessionLabels(const SessionRow& row) {
  const SessionRecord& info = row.overview->info;
  return {
      {"session", row.id},  {"client", info.client_name},         {"tenant", info.tenant},
      {"pod", row.k8s.pod}, {"namespace", row.k8s.pod_namespace}, {"container", row.k8s.container}};
}

bool HasFigures(const SessionDeviceBooks& usage) {
  return usage.allocated_bytes != 0 || usage.reserved_bytes != 0 ||
         usage.peak_allocated_bytes != 0 || usage.peak_reserved_bytes != 0 ||
         usage.imported_bytes != 0 || usage.limit_bytes != 0 || usage.allocations != 0;
}

uint64_t Current(const StatArray& stat) {
  const int64_t value = stat[kAggregate].current;
  return value > 0 ? static_cast<uint64_t>(value) : 0;
}

uint64_t NonNegative(int64_t value) { return value > 0 ? static_cast<uint64_t>(value) : 0; }

}  // namespace

std::string RenderMetrics(const MetricsSources& s) {
  PrometheusText text;
  text.Family("gpumux_build_info", Type::kGauge,
              "gpumuxd's version and backend; the value is always 1.");
  text.Sample("gpumux_build_info", {{"version", s.version}, {"backend", s.backend->name()}}, 1);

  // Devices: each figure copied under the allocator's device lock.
  std::vector<DeviceRow> devices(static_cast<size_t>(s.backend->device_count()));
  for (int d = 0; d < s.backend->device_count(); ++d) {
    DeviceRow& row = devices[static_cast<size_t>(d)];
    const DeviceIndex device(d);
    row.gpu = absl::StrCat(d);
    row.info = &s.backend->device_info(device);
    if (absl::StatusOr<uint64_t> free = s.backend->FreeMemory(device); free.ok()) row.free = *free;
    if (absl::StatusOr<DeviceStats> stats = s.memory->GetStats(device, std::nullopt); stats.ok())
      row.stats = *stats;
    row.healthy = s.backend->DeviceHealth(device).ok() && row.free.has_value();
  }
  text.Family("gpumux_device_info", Type::kGauge,
              "A device the daemon serves, with its name and PCI bus id; the value is always 1.");
  for (const DeviceRow& row : devices) {
    text.Sample("gpumux_device_info",
                {{"gpu", row.gpu}, {"name", row.info->name}, {"pci_bus_id", row.info->pci_bus_id}},
                1);
  }
  text.Family("gpumux_device_healthy", Type::kGauge,
              "1 while the device serves, 0 after a sticky error or when it cannot say what is "
              "free.");
  for (const DeviceRow& row : devices)
    text.Sample("gpumux_device_healthy", {{"gpu", row.gpu}}, row.healthy ? 1 : 0);
  text.Family("gpumux_device_total_bytes", Type::kGauge, "Memory of the device.");
  for (const DeviceRow& row : devices)
    text.Sample("gpumux_device_total_bytes", {{"gpu", row.gpu}}, row.info->total_memory);
  text.Family("gpumux_device_free_bytes", Type::kGauge,
              "Memory of the device free for new segments (cudaMemGetInfo); absent when the "
              "device cannot say.");
  for (const DeviceRow& row : devices) {
    if (row.free.has_value())
      text.Sample("gpumux_device_free_bytes", {{"gpu", row.gpu}}, *row.free);
  }
  struct StatFamily {
    const char* name;
    const char* help;
    const StatArray DeviceStats::*stat;
  };
  const StatFamily stat_families[] = {
      {"gpumux_device_reserved_bytes",
       "Bytes of segments reserved on the device for all sessions (reserved_bytes.all.current).",
       &DeviceStats::reserved_bytes},
      {"gpumux_device_allocated_bytes",
       "Bytes of blocks allocated on the device (allocated_bytes.all.current).",
       &DeviceStats::allocated_bytes},
      {"gpumux_device_active_bytes",
       "Bytes of blocks allocated or waiting on stream work (active_bytes.all.current).",
       &DeviceStats::active_bytes},
      {"gpumux_device_requested_bytes",
       "Bytes the allocations asked for, before rounding (requested_bytes.all.current).",
       &DeviceStats::requested_bytes},
      {"gpumux_device_segments", "Segments reserved on the device (segment.all.current).",
       &DeviceStats::segment},
  };
  for (const StatFamily& family : stat_families) {
    text.Family(family.name, Type::kGauge, family.help);
    for (const DeviceRow& row : devices)
      text.Sample(family.name, {{"gpu", row.gpu}}, Current(row.stats.*family.stat));
  }
  text.Family("gpumux_device_ooms_total", Type::kCounter,
              "Allocations refused for want of device memory (num_ooms).");
  for (const DeviceRow& row : devices)
    text.Sample("gpumux_device_ooms_total", {{"gpu", row.gpu}}, NonNegative(row.stats.num_ooms));
  text.Family("gpumux_device_alloc_retries_total", Type::kCounter,
              "Allocations that freed cached segments and retried (num_alloc_retries).");
  for (const DeviceRow& row : devices) {
    text.Sample("gpumux_device_alloc_retries_total", {{"gpu", row.gpu}},
                NonNegative(row.stats.num_alloc_retries));
  }

  // Sessions: one overview each, every book read under its own lock.
  const std::vector<SessionOverview> overviews =
      ListSessionOverviews(*s.sessions, *s.streams, *s.memory);
  std::vector<SessionRow> rows;
  rows.reserve(overviews.size());
  for (const SessionOverview& overview : overviews) {
    rows.push_back(SessionRow{.id = absl::StrCat(overview.info.id.value()),
                              .k8s = KubernetesIdentityOf(overview.info.labels),
                              .overview = &overview});
  }
  text.Family("gpumux_sessions", Type::kGauge, "Sessions open now.");
  text.Sample("gpumux_sessions", {}, static_cast<uint64_t>(rows.size()));
  struct UsageFamily {
    const char* name;
    const char* help;
    uint64_t SessionDeviceBooks::*figure;
  };
  const UsageFamily usage_families[] = {
      {"gpumux_session_allocated_bytes",
       "Bytes of blocks allocated to the session on the device (its allocated_bytes.all.current).",
       &SessionDeviceBooks::allocated_bytes},
      {"gpumux_session_reserved_bytes",
       "Bytes of segments reserved for the session on the device (its "
       "reserved_bytes.all.current).",
       &SessionDeviceBooks::reserved_bytes},
      {"gpumux_session_peak_allocated_bytes",
       "Most bytes allocated to the session on the device at once (its allocated_bytes.all.peak).",
       &SessionDeviceBooks::peak_allocated_bytes},
      {"gpumux_session_imported_bytes",
       "Bytes of other sessions' allocations the session imported on the device.",
       &SessionDeviceBooks::imported_bytes},
      {"gpumux_session_allocations", "Allocations the session holds on the device.",
       &SessionDeviceBooks::allocations},
  };
  for (const UsageFamily& family : usage_families) {
    text.Family(family.name, Type::kGauge, family.help);
    for (const SessionRow& row : rows) {
      for (const SessionDeviceBooks& usage : row.overview->devices) {
        if (!HasFigures(usage)) continue;
        std::vector<Label> labels = SessionLabels(row);
        const std::string gpu = absl::StrCat(usage.device.value());
        labels.emplace(labels.begin(), "gpu", gpu);
        text.Sample(family.name, labels, usage.*family.figure);
      }
    }
  }
  text.Family("gpumux_session_memory_limit_bytes", Type::kGauge,
              "The session's memory limit on the device; absent while it has none.");
  for (const SessionRow& row : rows) {
    for (const SessionDeviceBooks& usage : row.overview->devices) {
      if (usage.limit_bytes == 0) continue;
      std::vector<Label> labels = SessionLabels(row);
      const std::string gpu = absl::StrCat(usage.device.value());
      labels.emplace(labels.begin(), "gpu", gpu);
      text.Sample("gpumux_session_memory_limit_bytes", labels, usage.limit_bytes);
    }
  }
  text.Family("gpumux_session_streams", Type::kGauge,
              "Streams the session created and holds (default streams not counted).");
  for (const SessionRow& row : rows) {
    text.Sample("gpumux_session_streams", SessionLabels(row),
                static_cast<uint64_t>(row.overview->counts.streams));
  }
  text.Family("gpumux_session_events", Type::kGauge,
              "Events the session created or opened and holds.");
  for (const SessionRow& row : rows) {
    text.Sample("gpumux_session_events", SessionLabels(row),
                static_cast<uint64_t>(row.overview->counts.events));
  }

  // Running totals.
  const SessionCounts counts = s.lifecycle->counts();
  text.Family("gpumux_sessions_opened_total", Type::kCounter, "Sessions opened.");
  text.Sample("gpumux_sessions_opened_total", {}, counts.opened);
  text.Family("gpumux_sessions_ended_total", Type::kCounter,
              "Sessions ended, by reason: closed by the client, crashed (its stream broke), "
              "killed by an operator, ended by the daemon's shutdown, or a protocol error.");
  for (int r = 0; r < kSessionEndReasons; ++r) {
    text.Sample("gpumux_sessions_ended_total",
                {{"reason", SessionEndReasonName(static_cast<SessionEndReason>(r))}},
                counts.ended[static_cast<size_t>(r)]);
  }
  text.Family("gpumux_reclaimed_allocated_bytes_total", Type::kCounter,
              "Bytes of blocks ended sessions still held, freed by the daemon.");
  text.Sample("gpumux_reclaimed_allocated_bytes_total", {}, counts.reclaimed_allocated_bytes);
  text.Family("gpumux_reclaimed_reserved_bytes_total", Type::kCounter,
              "Bytes of ended sessions' segments the daemon returned to the devices.");
  text.Sample("gpumux_reclaimed_reserved_bytes_total", {}, counts.reclaimed_reserved_bytes);
  const ShareCounts shares = s.memory->share_counts();
  text.Family("gpumux_share_tokens_issued_total", Type::kCounter, "Share tokens issued.");
  text.Sample("gpumux_share_tokens_issued_total", {}, shares.issued);
  text.Family("gpumux_share_tokens_redeemed_total", Type::kCounter,
              "Share tokens redeemed by an import.");
  text.Sample("gpumux_share_tokens_redeemed_total", {}, shares.redeemed);

  if (s.append) s.append(text);
  return text.Take();
}

}  // namespace gpumux
