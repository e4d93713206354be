// gpumux._C.Observer: the daemon's read-only view for operators (Device and
// Observe services), which opens no session and so also works over the
// daemon's observe-only TCP listener.

#include <memory>
#include <string>

#include "gpumux/observer.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/native.h"
#include "python/src/unlocked.h"

namespace py = pybind11;

namespace gpumux::python {
namespace {

std::optional<SessionId> OptionalSession(std::optional<uint64_t> session) {
  if (!session) return std::nullopt;
  return SessionId(*session);
}

py::dict SessionToPython(const SessionInfo& info) {
  py::dict session;
  session["session_id"] = info.session_id.value();
  session["client_name"] = info.client_name;
  session["pid"] = info.pid;
  session["tenant"] = info.tenant;
  session["labels"] = info.labels;
  session["opened_unix_micros"] = info.opened_unix_micros;
  session["streams"] = info.streams;
  session["events"] = info.events;
  session["local_allocation"] = info.stats_page;
  py::list devices;
  for (const SessionDeviceUsage& usage : info.devices) {
    py::dict device;
    device["device"] = usage.device;
    device["allocated_bytes"] = usage.allocated_bytes;
    device["reserved_bytes"] = usage.reserved_bytes;
    device["allocations"] = usage.allocations;
    device["imported_bytes"] = usage.imported_bytes;
    device["memory_limit_bytes"] = usage.memory_limit_bytes;
    device["peak_allocated_bytes"] = usage.peak_allocated_bytes;
    device["peak_reserved_bytes"] = usage.peak_reserved_bytes;
    devices.append(device);
  }
  session["devices"] = devices;
  return session;
}

}  // namespace

void BindObserver(py::module_& module) {
  py::class_<Observer>(module, "Observer", R"doc(
A read-only view of a daemon for operators (gpumux.observe): devices,
sessions, and the memory statistics, summary and snapshot of a device or of
one session on it. Opens no session; works over the observe-only TCP
listener too.
)doc")
      .def(py::init([](const std::string& address) { return std::make_unique<Observer>(address); }),
           py::arg("address"))
      .def_property_readonly("address", &Observer::address)
      .def(
          "list_devices", [](Observer& o) { return Unlocked([&] { return o.ListDevices(); }); },
          "Every device's properties, by index.")
      .def(
          "list_sessions",
          [](Observer& o) {
            py::list sessions;
            for (const SessionInfo& info : Unlocked([&] { return o.ListSessions(); })) {
              sessions.append(SessionToPython(info));
            }
            return sessions;
          },
          "The live sessions: id, client name, pid, tenant, labels, and per device allocated, "
          "reserved, imported and peak bytes.")
      .def(
          "memory_stats",
          [](Observer& o, int32_t device, std::optional<uint64_t> session) {
            return Unlocked(
                [&] { return o.MemoryStats(DeviceIndex(device), OptionalSession(session)); });
          },
          py::arg("device") = 0, py::arg("session") = py::none(),
          "torch.cuda.memory_stats of the whole device, or of one session on it.")
      .def(
          "memory_summary",
          [](Observer& o, int32_t device, std::optional<uint64_t> session, bool abbreviated) {
            return Unlocked([&] {
              return o.MemorySummary(DeviceIndex(device), OptionalSession(session), abbreviated);
            });
          },
          py::arg("device") = 0, py::arg("session") = py::none(), py::arg("abbreviated") = false)
      .def(
          "memory_snapshot",
          [](Observer& o, std::optional<int32_t> device, std::optional<uint64_t> session) {
            std::optional<DeviceIndex> on;
            if (device) on = DeviceIndex(*device);
            return SnapshotToPython(
                Unlocked([&] { return o.MemorySnapshot(on, OptionalSession(session)); }));
          },
          py::arg("device") = py::none(), py::arg("session") = py::none());
}

}  // namespace gpumux::python
