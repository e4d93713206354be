#pragma once

// RenderMetrics: the /metrics page, gathered from the daemon's books at scrape
// time. Each book is read under its own lock for as long as copying its
// figures takes (a device's allocator lock once per session and device), so a
// scrape never holds up an allocation for longer than that.
//
// Families (Prometheus names, base units; labels in braces):
//   gpumux_build_info{version,backend} 1
//   gpumux_device_{total,free,reserved,allocated,active,requested}_bytes{gpu}
//   gpumux_device_segments{gpu}, gpumux_device_healthy{gpu} (1/0),
//   gpumux_device_info{gpu,name,pci_bus_id} 1,
//   gpumux_device_ooms_total{gpu}, gpumux_device_alloc_retries_total{gpu}
//   gpumux_sessions (open now)
//   gpumux_session_{allocated,reserved,peak_allocated,imported,memory_limit}_bytes and
//   gpumux_session_allocations, each {gpu,session,client,tenant[,pod,namespace,container]},
//   for the devices where the session has any figure (a limit only when one is set);
//   gpumux_session_streams and gpumux_session_events without gpu
//   gpumux_sessions_opened_total, gpumux_sessions_ended_total{reason},
//   gpumux_reclaimed_{allocated,reserved}_bytes_total,
//   gpumux_share_tokens_{issued,redeemed}_total
// plus whatever `append` adds (the gRPC call families, CallMetrics).
// No label holds a pid: `gpumux sessions` shows it.

#include <functional>
#include <string>

#include "common/formats/prometheus_text.h"
#include "server/backend/device_backend.h"
#include "server/core/memory_manager.h"
#include "server/core/session_lifecycle.h"
#include "server/core/session_registry.h"
#include "server/core/stream_manager.h"

namespace gpumux {

struct MetricsSources {
  const DeviceBackend* backend = nullptr;
  const MemoryManager* memory = nullptr;
  const SessionRegistry* sessions = nullptr;
  const StreamManager* streams = nullptr;
  const SessionLifecycle* lifecycle = nullptr;
  std::string version;
  // Appends more families; may be empty.
  std::function<void(PrometheusText&)> append;
};

std::string RenderMetrics(const MetricsSources& sources);

}  // namespace gpumux
