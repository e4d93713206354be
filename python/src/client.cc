// gpumux._C.Client: libgpumux's Client, one method per torch.cuda function
// (gpumux/__init__.py, memory.py and random.py turn them into torch.cuda's
// module functions over the default connection). Devices arrive as plain
// indices: the Python layer resolves None, torch.device and "cuda:N".

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/memory_snapshot.h"
#include "gpumux/nvtx.h"
#include "gpumux/random.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/native.h"
#include "python/src/unlocked.h"

namespace py = pybind11;

namespace gpumux::python {

ClientPtr ShareClient(std::unique_ptr<Client> client) {
  return ClientPtr(client.release(), [](Client* doomed) {
    // Ending the session takes round trips; the last reference may drop
    // with or without the GIL (a buffer's destructor releases it).
    std::optional<py::gil_scoped_release> unlocked;
    if (Py_IsInitialized() && PyGILState_Check()) unlocked.emplace();
    delete doomed;
  });
}

namespace {

std::optional<DeviceIndex> OptionalDevice(std::optional<int32_t> device) {
  if (!device) return std::nullopt;
  return DeviceIndex(*device);
}

AllocationMode ModeOf(const std::optional<std::string>& allocation) {
  if (!allocation) return AllocationMode::kDefault;
  if (*allocation == "local") return AllocationMode::kLocal;
  if (*allocation == "daemon") return AllocationMode::kDaemon;
  throw py::value_error(
      absl::StrCat("allocation must be \"local\" or \"daemon\", not \"", *allocation, "\""));
}

ClientPtr Connect(const std::string& address, const std::string& client_name,
                  const std::string& tenant, const std::map<std::string, std::string>& labels,
                  const std::optional<std::string>& allocation, double timeout) {
  ClientOptions options;
  options.client_name = client_name;
  options.tenant = tenant;
  options.labels = labels;
  options.allocation = ModeOf(allocation);
  options.open_timeout = absl::Seconds(timeout);
  std::unique_ptr<Client> client = Unlocked([&] { return Client::Connect(address, options); });
  return ShareClient(std::move(client));
}

// `nbytes` as a byte count: an int (or anything with __index__) in
// [0, 2**64). TypeError for anything else, gpumux.InvalidArgumentError (a
// ValueError) for a negative or too large one, in place of pybind11's
// signature dump.
uint64_t ByteCount(const py::handle& nbytes) {
  py::object index = py::reinterpret_borrow<py::object>(nbytes);
  if (!PyLong_Check(nbytes.ptr())) {
    if (!PyIndex_Check(nbytes.ptr())) {
      throw py::type_error(
          absl::StrCat("nbytes must be an int, not ", Py_TYPE(nbytes.ptr())->tp_name));
    }
    index = py::reinterpret_steal<py::object>(PyNumber_Index(nbytes.ptr()));
    if (!index) throw py::error_already_set();
  }
  const unsigned long long bytes = PyLong_AsUnsignedLongLong(index.ptr());
  if (bytes == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    RaiseStatus(absl::InvalidArgumentError(absl::StrCat(
        "nbytes must be a byte count in [0, 2**64), not ", py::str(index).cast<std::string>())));
  }
  return bytes;
}

// torch.empty(nbytes, dtype=uint8) without the tensor. A block the cache
// holds is taken with the GIL held (nothing waits); anything more (a lease,
// the daemon's allocation, an error to report) runs without it.
std::unique_ptr<Buffer> AllocateBuffer(ClientPtr c, const py::handle& size,
                                       std::optional<int32_t> device, const py::object& stream,
                                       bool shareable) {
  const uint64_t nbytes = ByteCount(size);
  // None: the calling thread's current device (no second call from Python).
  const DeviceIndex on(device ? *device : c->CurrentDevice().value());
  AllocateOptions options;
  options.shareable = shareable;
  if (!stream.is_none()) options.stream = stream.cast<const StreamHandle&>().stream;
  std::optional<DeviceBuffer> memory = memory::TryAllocateCached(*c, nbytes, on, options);
  if (!memory) memory.emplace(Unlocked([&] { return memory::Allocate(*c, nbytes, on, options); }));
  return std::make_unique<Buffer>(std::move(c), *std::move(memory));
}

// The default connection (gpumux.default_client()), kept here so that
// gpumux.allocate reads it without a Python lookup. Touched only with the GIL
// held; never destroyed by a static destructor, after the interpreter (the
// package clears it at exit).
ClientPtr& DefaultClientSlot() {
  static ClientPtr* const client = new ClientPtr();
  return *client;
}

// The default connection, made by gpumux._core._lazy_client() when there is none.
ClientPtr DefaultClient() {
  if (ClientPtr client = DefaultClientSlot(); client != nullptr) return client;
  return py::module_::import("gpumux._core").attr("_lazy_client")().cast<ClientPtr>();
}

// A device argument as gpumux._core._device_index reads it; plain indices here.
std::optional<int32_t> DeviceArgument(const py::object& device) {
  if (device.is_none()) return std::nullopt;
  if (PyLong_CheckExact(device.ptr())) {
    const long index = PyLong_AsLong(device.ptr());
    if (index >= 0 && index <= std::numeric_limits<int32_t>::max())
      return static_cast<int32_t>(index);
    PyErr_Clear();  // an overflow: _device_index says what is wrong
  }
  return py::module_::import("gpumux._core").attr("_device_index")(device).cast<int32_t>();
}

}  // namespace

py::list SnapshotToPython(const std::vector<SegmentInfo>& segments) {
  py::list out;
  for (const SegmentInfo& segment : segments) {
    py::dict entry;
    entry["device"] = segment.device;
    entry["address"] = segment.address;
    entry["total_size"] = segment.total_size;
    entry["allocated_size"] = segment.allocated_size;
    entry["active_size"] = segment.active_size;
    entry["requested_size"] = segment.requested_size;
    entry["stream"] = segment.stream;
    entry["segment_type"] = segment.segment_type;
    entry["segment_pool_id"] = py::make_tuple(0, 0);
    entry["is_expandable"] = segment.is_expandable;
    entry["frames"] = py::list();
    py::list blocks;
    for (const BlockInfo& block : segment.blocks) {
      py::dict b;
      b["address"] = block.address;
      b["size"] = block.size;
      b["requested_size"] = block.requested_size;
      b["state"] = block.state;
      b["frames"] = py::list();
      b["session_id"] = block.session_id.value();
      blocks.append(b);
    }
    entry["blocks"] = blocks;
    entry["session_id"] = segment.session_id.value();
    entry["segment_id"] = segment.segment_id.value();
    entry["shareable"] = segment.shareable;
    entry["leased"] = segment.leased;
    entry["blocks_unavailable"] = segment.blocks_unavailable;
    entry["blocks_unavailable_reason"] = segment.blocks_unavailable_reason;
    out.append(entry);
  }
  return out;
}

void BindClient(py::module_& module) {
  py::class_<DeviceProperties>(module, "DeviceProperties",
                               "torch.cuda.get_device_properties(device): what the daemon reports "
                               "about one of its devices.")
      .def_readonly("index", &DeviceProperties::index)
      .def_readonly("name", &DeviceProperties::name)
      .def_readonly("backend", &DeviceProperties::backend)
      .def_readonly("total_memory", &DeviceProperties::total_memory)
      .def_readonly("free_memory", &DeviceProperties::free_memory)
      .def_readonly("major", &DeviceProperties::major)
      .def_readonly("minor", &DeviceProperties::minor)
      .def_readonly("multi_processor_count", &DeviceProperties::multi_processor_count)
      .def_readonly("pci_bus_id", &DeviceProperties::pci_bus_id)
      .def_readonly("driver_version", &DeviceProperties::driver_version)
      .def_readonly("runtime_version", &DeviceProperties::runtime_version)
      .def_readonly("collectives", &DeviceProperties::collectives)
      .def_readonly("healthy", &DeviceProperties::healthy)
      .def_readonly("health", &DeviceProperties::health)
      .def_property_readonly("is_integrated", [](const DeviceProperties&) { return 0; })
      .def_property_readonly("is_multi_gpu_board", [](const DeviceProperties&) { return 0; })
      .def("__repr__", [](const DeviceProperties& p) {
        // torch's _CudaDeviceProperties repr.
        return absl::StrCat("_CudaDeviceProperties(name='", p.name, "', major=", p.major,
                            ", minor=", p.minor, ", total_memory=", p.total_memory >> 20,
                            "MB, multi_processor_count=", p.multi_processor_count, ")");
      });

  module.def("_connect", &Connect, py::arg("address"), py::arg("client_name") = "",
             py::arg("tenant") = "", py::arg("labels") = std::map<std::string, std::string>(),
             py::arg("allocation") = py::none(), py::arg("timeout") = 5.0,
             "Opens a session with the daemon at `address`.");
  module.def("_is_available", [](const std::string& address, double timeout) {
    py::gil_scoped_release unlocked;
    return Client::IsAvailable(address, absl::Seconds(timeout));
  });
  module.def("_default_address", [] { return DefaultAddress(); });
  module.def("_default_client", []() -> py::object {
    const ClientPtr& client = DefaultClientSlot();
    return client == nullptr ? py::none() : py::cast(client);
  });
  module.def("_set_default_client", [](std::optional<ClientPtr> client) {
    // The old one may be the last reference: it ends its session once the
    // slot no longer names it.
    ClientPtr old = std::exchange(DefaultClientSlot(), client.value_or(nullptr));
  });
  module.def(
      "allocate",
      [](const py::object& nbytes, const py::object& device, const py::object& stream,
         bool shareable) {
        return AllocateBuffer(DefaultClient(), nbytes, DeviceArgument(device), stream, shareable);
      },
      py::arg("nbytes"), py::arg("device") = py::none(), py::arg("stream") = py::none(),
      py::arg("shareable") = false, R"doc(
Allocates `nbytes` of device memory on the default connection
(torch.empty(nbytes, dtype=uint8) without the tensor) and returns a
gpumux.Buffer, freed when dropped.

device: None (the current device), an index, "cuda:N", "gpumux:N", a
torch.device or a gpumux.device.
stream: the gpumux.Stream the memory is used on (PyTorch's caching allocator
reuses blocks per stream; None: the current stream).
shareable: its own segment, so that share() exposes nothing else.
Raises OutOfMemoryError (PyTorch's message) when the device, the session's or
the tenant's limit is reached; InvalidArgumentError for 0 bytes or a bad
device.
)doc");

  py::class_<Client, ClientPtr>(module, "Client", R"doc(
A session with gpumuxd (gpumux.connect). Everything it allocated, created or
imported is released when the session ends: when the last Buffer, Stream,
Event and reference to the Client are gone, or when the process dies.
)doc")
      .def_property_readonly("address", &Client::address)
      .def_property_readonly("session_id", [](const Client& c) { return c.session_id().value(); })
      .def_property_readonly("tenant", &Client::tenant)
      .def_property_readonly("backend", &Client::backend)
      .def_property_readonly("daemon_version", &Client::daemon_version)
      .def_property_readonly("session_ended", &Client::session_ended)
      .def("ping", [](Client& c) { Unlocked([&] { return c.Ping(); }); })
      .def("init", [](Client& c) { Unlocked([&] { return c.Init(); }); })
      .def("is_initialized", &Client::IsInitialized)
      .def("device_count", [](Client& c) { return Unlocked([&] { return c.DeviceCount(); }); })
      .def("get_device_name",
           [](Client& c, int32_t d) {
             return Unlocked([&] { return c.GetDeviceName(DeviceIndex(d)); });
           })
      .def("get_device_properties",
           [](Client& c, int32_t d) {
             return Unlocked([&] { return c.GetDeviceProperties(DeviceIndex(d)); });
           })
      .def("get_device_capability",
           [](Client& c, int32_t d) {
             return Unlocked([&] { return c.GetDeviceCapability(DeviceIndex(d)); });
           })
      .def("get_arch_list", [](Client& c) { return Unlocked([&] { return c.GetArchList(); }); })
      .def("get_gencode_flags",
           [](Client& c) { return Unlocked([&] { return c.GetGencodeFlags(); }); })
      .def("synchronize",
           [](Client& c, int32_t d) { Unlocked([&] { return c.Synchronize(DeviceIndex(d)); }); })
      .def("current_blas_handle",
           [](Client& c) {
             return reinterpret_cast<uintptr_t>(Unlocked([&] { return c.CurrentBlasHandle(); }));
           })
      .def("current_device", [](const Client& c) { return c.CurrentDevice().value(); })
      .def("set_device",
           [](Client& c, int32_t d) { Unlocked([&] { return c.SetDevice(DeviceIndex(d)); }); })
      .def("current_stream_id",
           [](Client& c, int32_t d) {
             Stream s = c.CurrentStream(DeviceIndex(d));
             return py::make_tuple(s.id().value(), s.priority());
           })
      .def(
          "set_stream",
          [](Client& c, const StreamHandle& s) { Unlocked([&] { return c.SetStream(s.stream); }); })
      .def("stream_priority_range",
           [](Client& c, int32_t d) {
             StreamPriorities range =
                 Unlocked([&] { return c.GetStreamPriorityRange(DeviceIndex(d)); });
             return py::make_tuple(range.least, range.greatest);
           })
      .def(
          "allocate",
          [](ClientPtr c, const py::object& nbytes, std::optional<int32_t> device,
             const py::object& stream, bool shareable) {
            return AllocateBuffer(std::move(c), nbytes, device, stream, shareable);
          },
          py::arg("nbytes"), py::arg("device") = py::none(), py::arg("stream") = py::none(),
          py::arg("shareable") = false)
      .def(
          "import_buffer",
          [](ClientPtr c, const std::string& token) {
            DeviceBuffer memory = Unlocked([&] { return memory::Import(*c, token); });
            return std::make_unique<Buffer>(std::move(c), std::move(memory));
          },
          py::arg("token"))
      .def("ipc_collect",
           [](Client& c) {
             CollectedMappings collected = Unlocked([&] { return memory::IpcCollect(c); });
             return py::make_tuple(collected.mappings, collected.bytes);
           })
      .def("memory_stats",
           [](Client& c, int32_t d) {
             return Unlocked([&] { return memory::MemoryStats(c, DeviceIndex(d)); });
           })
      .def("memory_summary",
           [](Client& c, int32_t d, bool abbreviated) {
             return Unlocked([&] { return memory::MemorySummary(c, DeviceIndex(d), abbreviated); });
           })
      .def("memory_snapshot",
           [](Client& c, std::optional<int32_t> d) {
             return SnapshotToPython(
                 Unlocked([&] { return memory::MemorySnapshot(c, OptionalDevice(d)); }));
           })
      .def("reset_peak_memory_stats",
           [](Client& c, int32_t d) {
             Unlocked([&] { return memory::ResetPeakMemoryStats(c, DeviceIndex(d)); });
           })
      .def("reset_accumulated_memory_stats",
           [](Client& c, int32_t d) {
             Unlocked([&] { return memory::ResetAccumulatedMemoryStats(c, DeviceIndex(d)); });
           })
      .def("empty_cache",
           [](Client& c, std::optional<int32_t> d, bool all_sessions) {
             EmptyCacheOptions options{OptionalDevice(d), all_sessions};
             ReleasedCache released = Unlocked([&] { return memory::EmptyCache(c, options); });
             return py::make_tuple(released.released_bytes, released.released_segments);
           })
      .def("set_per_process_memory_fraction",
           [](Client& c, double fraction, int32_t d) {
             Unlocked(
                 [&] { return memory::SetPerProcessMemoryFraction(c, fraction, DeviceIndex(d)); });
           })
      .def("set_memory_limit",
           [](Client& c, uint64_t bytes, int32_t d) {
             Unlocked([&] { return memory::SetMemoryLimit(c, bytes, DeviceIndex(d)); });
           })
      .def("manual_seed",
           [](Client& c, uint64_t seed, std::optional<int32_t> d) {
             Unlocked([&] { return random::ManualSeed(c, seed, OptionalDevice(d)); });
           })
      .def("manual_seed_all",
           [](Client& c, uint64_t seed) {
             Unlocked([&] { return random::ManualSeedAll(c, seed); });
           })
      .def("seed",
           [](Client& c, std::optional<int32_t> d) {
             return Unlocked([&] { return random::Seed(c, OptionalDevice(d)); });
           })
      .def("seed_all", [](Client& c) { return Unlocked([&] { return random::SeedAll(c); }); })
      .def("initial_seed",
           [](Client& c, std::optional<int32_t> d) {
             return Unlocked([&] { return random::InitialSeed(c, OptionalDevice(d)); });
           })
      .def("get_rng_state",
           [](Client& c, std::optional<int32_t> d) {
             return py::bytes(Unlocked([&] { return random::GetRngState(c, OptionalDevice(d)); }));
           })
      .def("set_rng_state",
           [](Client& c, const std::string& state, std::optional<int32_t> d) {
             Unlocked([&] { return random::SetRngState(c, state, OptionalDevice(d)); });
           })
      .def("get_rng_state_all",
           [](Client& c) {
             py::list states;
             for (const std::string& state : Unlocked([&] { return random::GetRngStateAll(c); })) {
               states.append(py::bytes(state));
             }
             return states;
           })
      .def("set_rng_state_all",
           [](Client& c, const std::vector<std::string>& states) {
             Unlocked([&] { return random::SetRngStateAll(c, states); });
           })
      .def("nvtx_mark",
           [](Client& c, const std::string& message) {
             Unlocked([&] { return nvtx::Mark(c, message); });
           })
      .def("nvtx_range_push",
           [](Client& c, const std::string& message) {
             return Unlocked([&] { return nvtx::RangePush(c, message); });
           })
      .def("nvtx_range_pop", [](Client& c) { return Unlocked([&] { return nvtx::RangePop(c); }); })
      .def("__repr__", [](const Client& c) {
        return absl::StrCat("<gpumux.Client session ", c.session_id().value(), " at ", c.address(),
                            ">");
      });
}

}  // namespace gpumux::python
