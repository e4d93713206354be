// The native parts of gpumux.Stream and gpumux.Event (gpumux/streams.py
// adds torch's constructors and conveniences on top).

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/native.h"
#include "python/src/unlocked.h"

namespace py = pybind11;

namespace gpumux::python {

StreamHandle::StreamHandle(ClientPtr owner, Stream handle, bool owns)
    : client(std::move(owner)), stream(handle), owned(owns) {}

StreamHandle::~StreamHandle() {
  if (!owned || client->session_ended()) return;
  py::gil_scoped_release unlocked;
  // A stream already destroyed (NOT_FOUND) or a daemon gone: nothing is left.
  client->DestroyStream(stream).IgnoreError();
}

EventHandle::EventHandle(ClientPtr owner, Event handle)
    : client(std::move(owner)), event(std::move(handle)) {}

EventHandle::~EventHandle() {
  if (!event.created()) return;
  py::gil_scoped_release unlocked;
  event = Event();
}

void BindStreams(py::module_& module) {
  py::class_<StreamHandle>(module, "_Stream", "The native part of gpumux.Stream.")
      .def(py::init([](ClientPtr client, int32_t device, int priority,
                       std::optional<uint64_t> stream_id) {
             if (stream_id) {
               Stream handle(*client, DeviceIndex(device), StreamId(*stream_id), priority);
               return std::make_unique<StreamHandle>(client, handle, false);
             }
             Stream created =
                 Unlocked([&] { return client->CreateStream(DeviceIndex(device), priority); });
             return std::make_unique<StreamHandle>(client, created, true);
           }),
           py::arg("client"), py::arg("device"), py::arg("priority") = 0,
           py::arg("stream_id") = py::none(),
           "A new stream of the client's session on `device`, destroyed with its last "
           "reference; with stream_id, a handle to that existing stream, which is not.")
      .def_property_readonly("device_index",
                             [](const StreamHandle& self) { return self.stream.device().value(); })
      .def_property_readonly("stream_id",
                             [](const StreamHandle& self) { return self.stream.id().value(); })
      .def_property_readonly("priority",
                             [](const StreamHandle& self) { return self.stream.priority(); })
      .def_property_readonly("is_default",
                             [](const StreamHandle& self) { return self.stream.is_default(); })
      .def(
          "query",
          [](const StreamHandle& self) { return Unlocked([&] { return self.stream.Query(); }); },
          "True when all work queued on the stream so far has completed.")
      .def(
          "synchronize",
          [](const StreamHandle& self) { Unlocked([&] { return self.stream.Synchronize(); }); },
          "Waits until all work queued on the stream so far has completed.")
      .def(
          "wait_event",
          [](const StreamHandle& self, const EventHandle& event) {
            Unlocked([&] { return self.stream.WaitEvent(event.event); });
          },
          py::arg("event"), "Later work on this stream waits for the event's captured work.")
      .def(
          "wait_stream",
          [](const StreamHandle& self, const StreamHandle& other) {
            Unlocked([&] { return self.stream.WaitStream(other.stream); });
          },
          py::arg("stream"),
          "Later work on this stream waits for the work queued on `stream` so far.")
      .def("__eq__",
           [](const StreamHandle& self, py::object other) {
             return py::isinstance<StreamHandle>(other) &&
                    self.stream == other.cast<const StreamHandle&>().stream;
           })
      .def("__hash__", [](const StreamHandle& self) {
        return py::hash(py::make_tuple(reinterpret_cast<uintptr_t>(self.client.get()),
                                       self.stream.device().value(), self.stream.id().value()));
      });

  py::class_<EventHandle>(module, "_Event", "The native part of gpumux.Event.")
      .def(py::init([](ClientPtr client, bool enable_timing, bool blocking, bool interprocess,
                       std::optional<int32_t> ipc_device, std::optional<py::bytes> ipc_handle) {
             if (ipc_handle) {
               // Another session's interprocess event, opened on ipc_device.
               std::string bytes = *ipc_handle;
               Event opened = Unlocked([&] {
                 return client->OpenEventIpcHandle(DeviceIndex(ipc_device.value_or(0)), bytes);
               });
               return std::make_unique<EventHandle>(client, std::move(opened));
             }
             EventOptions options{enable_timing, blocking, interprocess};
             return std::make_unique<EventHandle>(client, Event(*client, options));
           }),
           py::arg("client"), py::arg("enable_timing") = false, py::arg("blocking") = false,
           py::arg("interprocess") = false, py::arg("ipc_device") = py::none(),
           py::arg("ipc_handle") = py::none(),
           "An event, created on the daemon when first recorded; with ipc_handle, another "
           "session's interprocess event opened on ipc_device.")
      .def_property_readonly(
          "enable_timing",
          [](const EventHandle& self) { return self.event.options().enable_timing; })
      .def_property_readonly("blocking",
                             [](const EventHandle& self) { return self.event.options().blocking; })
      .def_property_readonly(
          "interprocess", [](const EventHandle& self) { return self.event.options().interprocess; })
      .def_property_readonly("device_index",
                             [](const EventHandle& self) -> std::optional<int32_t> {
                               auto device = self.event.device();
                               if (!device) return std::nullopt;
                               return device->value();
                             })
      .def(
          "record",
          [](EventHandle& self, py::object stream) {
            if (stream.is_none()) {
              Unlocked([&] { return self.event.Record(); });
            } else {
              const Stream& on = stream.cast<const StreamHandle&>().stream;
              Unlocked([&] { return self.event.Record(on); });
            }
          },
          py::arg("stream") = py::none(),
          "Captures the work queued so far on `stream` (None: the current stream).")
      .def(
          "query",
          [](const EventHandle& self) { return Unlocked([&] { return self.event.Query(); }); },
          "True when the captured work has completed (or the event was never recorded).")
      .def(
          "synchronize",
          [](const EventHandle& self) { Unlocked([&] { return self.event.Synchronize(); }); },
          "Waits until the captured work has completed.")
      .def(
          "wait",
          [](const EventHandle& self, py::object stream) {
            if (stream.is_none()) {
              Unlocked([&] { return self.event.Wait(); });
            } else {
              const Stream& on = stream.cast<const StreamHandle&>().stream;
              Unlocked([&] { return self.event.Wait(on); });
            }
          },
          py::arg("stream") = py::none(),
          "Makes `stream` (None: the current stream) wait for the captured work.")
      .def(
          "elapsed_time",
          [](const EventHandle& self, const EventHandle& end) {
            return Unlocked([&] { return self.event.ElapsedTime(end.event); });
          },
          py::arg("end_event"), "Milliseconds between this event's and end_event's captured work.")
      .def(
          "ipc_handle",
          [](EventHandle& self) {
            std::string handle = Unlocked([&] { return self.event.IpcHandle(); });
            return py::bytes(handle);
          },
          "The 64 bytes another process opens the event with (Event.from_ipc_handle). The event "
          "must be interprocess (FailedPreconditionError otherwise).");
}

}  // namespace gpumux::python
