#include "server/rpc/observe_proto.h"

#include "absl/time/time.h"

namespace gpumux {

void ToProto(const SessionOverview& overview, v1::SessionInfo* out) {
  const SessionRecord& info = overview.info;
  out->set_session_id(info.id.value());
  out->set_client_name(info.client_name);
  out->set_pid(info.pid);
  out->set_tenant(info.tenant);
  out->mutable_labels()->insert(info.labels.begin(), info.labels.end());
  out->set_opened_unix_micros(absl::ToUnixMicros(info.opened));
  out->set_streams(static_cast<uint32_t>(overview.counts.streams));
  out->set_events(static_cast<uint32_t>(overview.counts.events));
  out->set_stats_page(overview.stats_page);
  out->set_stats_page_rejected(overview.stats_page_rejected);
  for (const SessionDeviceBooks& usage : overview.devices) {
    v1::SessionDeviceUsage* u = out->add_devices();
    u->set_device(usage.device.value());
    u->set_allocated_bytes(usage.allocated_bytes);
    u->set_reserved_bytes(usage.reserved_bytes);
    u->set_allocations(usage.allocations);
    u->set_imported_bytes(usage.imported_bytes);
    u->set_memory_limit_bytes(usage.limit_bytes);
    u->set_peak_allocated_bytes(usage.peak_allocated_bytes);
    u->set_peak_reserved_bytes(usage.peak_reserved_bytes);
  }
}

}  // namespace gpumux
