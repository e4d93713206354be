// gpumux.Buffer: an allocation of device memory as a Python object, with the
// buffer protocol and __array_interface__ where its memory is this process's
// host memory, __cuda_array_interface__ where it is CUDA memory, and DLPack
// on both, so numpy, torch and CuPy take it without a copy.

#include <dlpack/dlpack.h>

#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/random.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/dtype.h"
#include "python/src/errors.h"
#include "python/src/host_view.h"
#include "python/src/native.h"
#include "python/src/unlocked.h"

namespace py = pybind11;

namespace gpumux::python {

namespace {

// The live Buffers whose memory this process maps, by the address it starts
// at. Only touched with the GIL held (Buffers are made and dropped with it),
// which is the lock that guards it.
std::map<uintptr_t, Buffer*>& LiveBuffers() {
  static auto* const buffers = new std::map<uintptr_t, Buffer*>();
  return *buffers;
}

void Forget(const Buffer& buffer) {
  if (buffer.memory.valid() && buffer.memory.data() != nullptr)
    LiveBuffers().erase(reinterpret_cast<uintptr_t>(buffer.memory.data()));
}

}  // namespace

Buffer* FindBuffer(uintptr_t address, uint64_t nbytes) {
  const std::map<uintptr_t, Buffer*>& buffers = LiveBuffers();
  auto after = buffers.upper_bound(address);
  if (after == buffers.begin()) return nullptr;
  Buffer* buffer = std::prev(after)->second;
  const uint64_t start = std::prev(after)->first;
  const uint64_t size = buffer->memory.size();
  if (address - start > size || nbytes > size - (address - start)) return nullptr;
  return buffer;
}

Buffer::Buffer(ClientPtr owner, DeviceBuffer buffer)
    : client(std::move(owner)), memory(std::move(buffer)) {
  host_memory = memory.data() != nullptr && memory.cuda_device() < 0 && client->backend() == "host";
  if (memory.valid() && memory.data() != nullptr)
    LiveBuffers()[reinterpret_cast<uintptr_t>(memory.data())] = this;
}

Buffer::~Buffer() {
  Forget(*this);
  if (!memory.valid() || memory::TryFree(*client, memory)) return;
  py::gil_scoped_release unlocked;
  memory = DeviceBuffer();
}

const DeviceBuffer& Buffer::Live() const {
  if (!memory.valid()) throw py::value_error("the buffer was freed");
  return memory;
}

void Buffer::Free() {
  if (!memory.valid()) return;
  if (exports > 0) {
    throw py::buffer_error(
        absl::StrCat("cannot free the buffer: ", exports,
                     " view(s) (buffer protocol or DLPack) still use its memory; "
                     "drop them first"));
  }
  Forget(*this);
  if (memory::TryFree(*client, memory)) return;
  Unlocked([&] { return memory::Free(*client, std::move(memory)); });
}

namespace {

std::optional<Stream> StreamOf(const py::object& stream) {
  if (stream.is_none()) return std::nullopt;
  return stream.cast<const StreamHandle&>().stream;
}

// The bytes a copy or fill covers: `nbytes` from `offset`, or all the rest.
uint64_t SpanOf(const DeviceBuffer& buffer, uint64_t offset, std::optional<uint64_t> nbytes) {
  if (nbytes) return *nbytes;
  if (offset > buffer.size()) {
    throw py::value_error(
        absl::StrCat("offset ", offset, " is past the end of the ", buffer.size(), "-byte buffer"));
  }
  return buffer.size() - offset;
}

// Fills `count` values (absent: as many as fit from `offset`) and returns
// the generator state they were drawn from, (seed, offset).
py::tuple Generate(Buffer& self, const std::string& dtype_name, const Distribution& distribution,
                   uint64_t offset, std::optional<uint64_t> count, const py::object& stream) {
  const DeviceBuffer& memory = self.Live();
  Dtype dtype = DtypeOf(dtype_name);
  uint64_t elements = count ? *count : SpanOf(memory, offset, std::nullopt) / DtypeSize(dtype);
  CopyOptions options;
  options.stream = StreamOf(stream);
  options.wait = true;
  GenerateResult result = Unlocked([&] {
    return random::Generate(*self.client, memory, offset, dtype, elements, distribution, options);
  });
  return py::make_tuple(result.seed, result.offset);
}

// DLPack: the capsule's tensor keeps the Buffer alive until the consumer
// calls the deleter.
struct DlpackContext {
  DLManagedTensor tensor;
  int64_t shape[1];
  PyObject* owner;
};

void DeleteDlpack(DLManagedTensor* tensor) {
  auto* context = static_cast<DlpackContext*>(tensor->manager_ctx);
  PyGILState_STATE state = PyGILState_Ensure();
  py::handle(context->owner).cast<Buffer&>().exports--;
  Py_DECREF(context->owner);
  PyGILState_Release(state);
  delete context;
}

void DestroyCapsule(PyObject* capsule) {
  // Consumers rename it "used_dltensor"; one never consumed still owns it.
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
}

std::pair<int, int> DlpackDevice(const Buffer& self) {
  const DeviceBuffer& memory = self.Live();
  if (self.host_memory) return {kDLCPU, 0};
  if (memory.cuda_device() >= 0) return {kDLCUDA, memory.cuda_device()};
  throw py::buffer_error(
      "this buffer's memory is not mapped into this process (a daemon reached over TCP, or CUDA "
      "memory in a build without CUDA): use copy_to or tobytes");
}

// Before handing CUDA memory to a consumer, the work the daemon queued on
// it (copies, fills) must be done: the consumer's streams are this
// process's and do not order after the daemon's.
void SynchronizeForExport(Buffer& self) {
  if (self.host_memory) return;
  Stream current = self.client->CurrentStream(self.Live().device());
  Unlocked([&] { return current.Synchronize(); });
}

// __dlpack__(stream=None, max_version=None, dl_device=None, copy=None), the
// 2023.12 signature. Only unversioned ("dltensor") capsules are made, which
// the spec lets a producer return whatever max_version asks.
py::capsule ToDlpack(py::object owner, const py::object& stream, const py::object& /*max_version*/,
                     const py::object& dl_device, const py::object& copy) {
  Buffer& self = owner.cast<Buffer&>();
  auto [type, id] = DlpackDevice(self);
  if (!copy.is_none() && copy.cast<bool>()) {
    throw py::buffer_error(
        "__dlpack__: copy=True is not supported: gpumux buffers export their memory");
  }
  if (!dl_device.is_none()) {
    auto wanted = dl_device.cast<std::pair<int, int>>();
    if (wanted.first != type || wanted.second != id) {
      throw py::buffer_error(absl::StrCat("__dlpack__: dl_device (", wanted.first, ", ",
                                          wanted.second, ") is not the buffer's (", type, ", ", id,
                                          ")"));
    }
  }
  if (!stream.is_none() && !py::isinstance<py::int_>(stream)) {
    throw py::type_error("__dlpack__: stream must be None or an int");
  }
  if (type == kDLCPU && !stream.is_none()) {
    throw py::value_error("__dlpack__: stream must be None for host memory (kDLCPU)");
  }
  // -1: the consumer asks for no synchronization.
  if (type == kDLCUDA && (stream.is_none() || stream.cast<int64_t>() != -1))
    SynchronizeForExport(self);
  auto* context = new DlpackContext();
  context->shape[0] = static_cast<int64_t>(self.memory.size());
  context->owner = owner.release().ptr();  // the reference the deleter drops
  self.exports++;
  DLTensor& tensor = context->tensor.dl_tensor;
  tensor.data = self.memory.data();
  tensor.device = DLDevice{static_cast<DLDeviceType>(type), id};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLUInt, 8, 1};
  tensor.shape = context->shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  context->tensor.manager_ctx = context;
  context->tensor.deleter = DeleteDlpack;
  PyObject* capsule = PyCapsule_New(&context->tensor, "dltensor", DestroyCapsule);
  if (capsule == nullptr) {
    DeleteDlpack(&context->tensor);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

// The buffer protocol (pybind11's def_buffer cannot refuse a request):
// host memory only, 1-D unsigned bytes, writable.
extern "C" int GetBuffer(PyObject* object, Py_buffer* view, int flags) {
  view->obj = nullptr;
  Buffer* self = nullptr;
  try {
    self = &py::handle(object).cast<Buffer&>();
  } catch (const py::cast_error&) {
    PyErr_SetString(PyExc_TypeError, "not a gpumux.Buffer");
    return -1;
  }
  if (!self->memory.valid()) {
    PyErr_SetString(PyExc_ValueError, "the buffer was freed");
    return -1;
  }
  if (!self->host_memory) {
    PyErr_SetString(
        PyExc_BufferError,
        "the buffer protocol needs host memory: this buffer is CUDA memory (use "
        "__cuda_array_interface__ or __dlpack__) or not mapped here (over TCP: use tobytes)");
    return -1;
  }
  if (PyBuffer_FillInfo(view, object, self->memory.data(),
                        static_cast<Py_ssize_t>(self->memory.size()), /*readonly=*/0, flags) != 0) {
    return -1;
  }
  self->exports++;
  return 0;
}

extern "C" void ReleaseBuffer(PyObject* object, Py_buffer* /*view*/) {
  py::handle(object).cast<Buffer&>().exports--;
}

py::dict ArrayInterface(Buffer& self, int version) {
  py::dict interface;
  interface["shape"] = py::make_tuple(self.Live().size());
  interface["typestr"] = "|u1";
  interface["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(self.memory.data()), false);
  interface["strides"] = py::none();
  interface["version"] = version;
  return interface;
}

}  // namespace

void BindBuffer(py::module_& module) {
  py::class_<Buffer> buffer(module, "Buffer", py::buffer_protocol(), R"doc(
Device memory from gpumux.allocate or gpumux.import_buffer.

Dropping the last reference frees it (the free is queued, as `del` of a
torch tensor); `free()` or leaving a `with` block frees it at once. Views
taken through the buffer protocol, __array_interface__,
__cuda_array_interface__ or DLPack share the memory without a copy; numpy's
and DLPack's keep the buffer alive, __cuda_array_interface__ consumers must.
)doc");
  PyTypeObject* buffer_type = reinterpret_cast<PyTypeObject*>(buffer.ptr());
  buffer_type->tp_as_buffer->bf_getbuffer = GetBuffer;
  buffer_type->tp_as_buffer->bf_releasebuffer = ReleaseBuffer;
  buffer
      .def_property_readonly(
          "nbytes", [](const Buffer& self) { return self.Live().size(); }, "Bytes asked for.")
      .def("__len__", [](const Buffer& self) { return self.Live().size(); })
      .def_property_readonly(
          "device", [](const Buffer& self) { return self.Live().device().value(); },
          "The daemon's device index.")
      .def_property_readonly(
          "ptr", [](const Buffer& self) { return reinterpret_cast<uintptr_t>(self.Live().data()); },
          "This process's pointer to the memory (host memory on the host backend, a CUDA device "
          "pointer on CUDA); 0 where it is not mapped (over TCP).")
      .def_property_readonly(
          "address", [](const Buffer& self) { return self.Live().address(); },
          "The device address memory snapshots report.")
      .def_property_readonly("allocation_id",
                             [](const Buffer& self) { return self.Live().id().value(); })
      .def_property_readonly(
          "allocated_size", [](const Buffer& self) { return self.Live().allocated_size(); },
          "The block's size after PyTorch's rounding.")
      .def_property_readonly("segment_id",
                             [](const Buffer& self) { return self.Live().segment_id().value(); })
      .def_property_readonly(
          "local", [](const Buffer& self) { return self.Live().local(); },
          "Carved by this process's own allocator from a leased segment.")
      .def_property_readonly("freed", [](const Buffer& self) { return !self.memory.valid(); })
      .def("free", &Buffer::Free,
           "Frees the memory now and returns once the daemon answered. No-op when already freed; "
           "BufferError while numpy, memoryview or DLPack views of it live.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](Buffer& self, py::args) {
             // Views taken in the block keep the memory: it is freed when they go.
             if (self.exports == 0) self.Free();
           })
      .def(
          "share",
          [](Buffer& self) {
            const DeviceBuffer& memory = self.Live();
            return Unlocked([&] { return memory::Share(*self.client, memory); });
          },
          "A single-use token another process passes to gpumux.import_buffer. The buffer must "
          "have been allocated with shareable=True (FailedPreconditionError otherwise).")
      .def(
          "record_stream",
          [](Buffer& self, const StreamHandle& stream) {
            const DeviceBuffer& memory = self.Live();
            Unlocked([&] { return memory::RecordStream(*self.client, memory, stream.stream); });
          },
          py::arg("stream"), "tensor.record_stream(stream).")
      .def(
          "copy_from",
          [](Buffer& self, py::object src, uint64_t offset, uint64_t src_offset,
             std::optional<uint64_t> nbytes, py::object stream, bool non_blocking) {
            const DeviceBuffer& memory = self.Live();
            CopyOptions options;
            options.stream = StreamOf(stream);
            options.wait = !non_blocking;
            if (py::isinstance<Buffer>(src)) {
              const DeviceBuffer& source = src.cast<Buffer&>().Live();
              uint64_t size = SpanOf(source, src_offset, nbytes);
              Unlocked([&] {
                return copy::DeviceToDevice(*self.client, memory, offset, source, src_offset, size,
                                            options);
              });
              return;
            }
            HostView view(src, PyBUF_ANY_CONTIGUOUS);
            if (src_offset > view.size())
              throw py::value_error("src_offset is past the end of src");
            uint64_t size = nbytes ? *nbytes : view.size() - src_offset;
            if (src_offset + size > view.size()) {
              throw py::value_error(absl::StrCat("src holds ", view.size(), " bytes, fewer than ",
                                                 src_offset, " + ", size));
            }
            Unlocked([&] {
              return copy::HostToDevice(*self.client, memory, offset,
                                        static_cast<const char*>(view.data()) + src_offset, size,
                                        options);
            });
          },
          py::arg("src"), py::arg("offset") = 0, py::arg("src_offset") = 0,
          py::arg("nbytes") = py::none(), py::arg("stream") = py::none(),
          py::arg("non_blocking") = false,
          "Copies bytes into this buffer at `offset`: from another Buffer (device to device) or "
          "from any object with the buffer protocol (bytes, bytearray, numpy arrays...). "
          "`nbytes` absent: all of src from src_offset. non_blocking=True returns once queued.")
      .def(
          "copy_to",
          [](Buffer& self, py::object dst, uint64_t offset, std::optional<uint64_t> nbytes,
             py::object stream) {
            const DeviceBuffer& memory = self.Live();
            HostView view(dst, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE);
            uint64_t size =
                nbytes ? *nbytes
                       : std::min<uint64_t>(view.size(), SpanOf(memory, offset, std::nullopt));
            if (size > view.size()) {
              throw py::value_error(
                  absl::StrCat("dst holds ", view.size(), " bytes, fewer than ", size));
            }
            CopyOptions options;
            options.stream = StreamOf(stream);
            Unlocked([&] {
              return copy::DeviceToHost(*self.client, view.data(), memory, offset, size, options);
            });
          },
          py::arg("dst"), py::arg("offset") = 0, py::arg("nbytes") = py::none(),
          py::arg("stream") = py::none(),
          "Copies bytes of this buffer from `offset` into a writable object with the buffer "
          "protocol; `nbytes` absent: as many as both hold. Returns once they are there.")
      .def(
          "tobytes",
          [](Buffer& self, uint64_t offset, std::optional<uint64_t> nbytes) {
            const DeviceBuffer& memory = self.Live();
            uint64_t size = SpanOf(memory, offset, nbytes);
            std::string bytes(size, '\0');
            Unlocked([&] {
              return copy::DeviceToHost(*self.client, bytes.data(), memory, offset, size);
            });
            return py::bytes(bytes);
          },
          py::arg("offset") = 0, py::arg("nbytes") = py::none(), "The bytes, copied out.")
      .def(
          "memset",
          [](Buffer& self, int value, uint64_t offset, std::optional<uint64_t> nbytes,
             py::object stream, bool non_blocking) {
            if (value < 0 || value > 255) throw py::value_error("memset value must be in [0, 255]");
            const DeviceBuffer& memory = self.Live();
            uint64_t size = SpanOf(memory, offset, nbytes);
            CopyOptions options;
            options.stream = StreamOf(stream);
            options.wait = !non_blocking;
            Unlocked([&] {
              return copy::Memset(*self.client, memory, offset, static_cast<uint8_t>(value), size,
                                  options);
            });
          },
          py::arg("value"), py::arg("offset") = 0, py::arg("nbytes") = py::none(),
          py::arg("stream") = py::none(), py::arg("non_blocking") = false,
          "Sets `nbytes` bytes from `offset` (absent: the rest) to `value`.")
      .def(
          "uniform_",
          [](Buffer& self, double low, double high, const std::string& dtype, uint64_t offset,
             std::optional<uint64_t> count, py::object stream) {
            return Generate(self, dtype, Uniform{low, high}, offset, count, stream);
          },
          py::arg("low") = 0.0, py::arg("high") = 1.0, py::arg("dtype") = "float32",
          py::arg("offset") = 0, py::arg("count") = py::none(), py::arg("stream") = py::none(),
          "Fills with values uniform on [low, high) from the device's generator "
          "(torch.rand; torch.randint for integer dtypes). Returns the (seed, offset) drawn from.")
      .def(
          "normal_",
          [](Buffer& self, double mean, double std, const std::string& dtype, uint64_t offset,
             std::optional<uint64_t> count, py::object stream) {
            return Generate(self, dtype, Normal{mean, std}, offset, count, stream);
          },
          py::arg("mean") = 0.0, py::arg("std") = 1.0, py::arg("dtype") = "float32",
          py::arg("offset") = 0, py::arg("count") = py::none(), py::arg("stream") = py::none(),
          "Fills with normal values (tensor.normal_). Returns the (seed, offset) drawn from.")
      .def(
          "random_",
          [](Buffer& self, const std::string& dtype, uint64_t offset, std::optional<uint64_t> count,
             py::object stream) { return Generate(self, dtype, Bits{}, offset, count, stream); },
          py::arg("dtype") = "int32", py::arg("offset") = 0, py::arg("count") = py::none(),
          py::arg("stream") = py::none(),
          "Fills with raw Philox bits (tensor.random_). Returns the (seed, offset) drawn from.")
      .def_property_readonly(
          "__array_interface__",
          [](Buffer& self) {
            if (!self.host_memory)
              throw py::attribute_error("__array_interface__: not host memory");
            return ArrayInterface(self, 3);
          },
          "numpy's array interface (host memory only): 1-D uint8.")
      .def_property_readonly(
          "__cuda_array_interface__",
          [](Buffer& self) {
            if (self.host_memory || self.Live().cuda_device() < 0) {
              throw py::attribute_error("__cuda_array_interface__: not CUDA memory mapped here");
            }
            // The daemon's queued work on the memory is done before the
            // pointer is handed out, so no stream needs to wait: stream None.
            SynchronizeForExport(self);
            py::dict interface = ArrayInterface(self, 3);
            interface["stream"] = py::none();
            return interface;
          },
          "Version 3, CUDA memory only: 1-D uint8. The daemon's queued work on the buffer's "
          "device (its current stream) is synchronized first, so `stream` is None.")
      .def("__dlpack__", &ToDlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none(),
           "A DLPack capsule of the memory (1-D uint8), kDLCPU on the host backend, kDLCUDA on "
           "CUDA. For CUDA, unless stream is -1, the daemon's queued work on the memory is done "
           "first.")
      .def("__dlpack_device__",
           [](const Buffer& self) {
             auto [type, id] = DlpackDevice(self);
             return py::make_tuple(type, id);
           })
      .def("__repr__", [](const Buffer& self) {
        if (!self.memory.valid()) return std::string("<gpumux.Buffer freed>");
        // A local block's id is the client's own (top bit set): its address
        // names it.
        if (self.memory.local()) {
          return absl::StrCat("<gpumux.Buffer ", self.memory.size(), " bytes on device ",
                              self.memory.device().value(), ", local block at 0x",
                              absl::Hex(self.memory.address()), ">");
        }
        return absl::StrCat("<gpumux.Buffer ", self.memory.size(), " bytes on device ",
                            self.memory.device().value(), ", allocation ", self.memory.id().value(),
                            ">");
      });
}

}  // namespace gpumux::python
