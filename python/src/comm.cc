// torch.cuda.comm's native calls (gpumux._C._broadcast, ..., as torch._C's):
// libgpumux's collectives (gpumux/comm.h, client_comm.cc) over tensors the
// Python layer (gpumux/comm.py) has already found in Buffers. A tensor
// arrives as (buffer or None, offset, dtype name, shape, device); a result
// leaves as (buffer or None, offset, dtype name, shape, device, owned), its
// buffer a new Buffer when owned, else the very Buffer object of the input
// that holds it. The daemon checks every argument with PyTorch's messages.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/comm.h"
#include "gpumux/comm_types.h"
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

// The tensors of one call, with the Buffer objects their memory lies in, so
// that a result in an input's memory comes back as that object.
class CallTensors {
 public:
  TensorRef Add(const py::handle& described) {
    py::tuple fields = py::reinterpret_borrow<py::object>(described).cast<py::tuple>();
    if (fields.size() != 5) {
      throw py::value_error("a tensor is (buffer, offset, dtype, shape, device)");
    }
    TensorRef tensor;
    if (!fields[0].is_none()) {
      const Buffer& buffer = fields[0].cast<const Buffer&>();
      tensor.buffer = &buffer.Live();
      owners_.emplace_back(tensor.buffer, py::reinterpret_borrow<py::object>(fields[0]));
    }
    tensor.offset = fields[1].cast<uint64_t>();
    tensor.dtype = DtypeOf(fields[2].cast<std::string>());
    tensor.shape = fields[3].cast<std::vector<int64_t>>();
    tensor.device = DeviceIndex(fields[4].cast<int32_t>());
    return tensor;
  }

  std::vector<TensorRef> AddAll(const py::handle& list) {
    std::vector<TensorRef> tensors;
    for (py::handle described : py::reinterpret_borrow<py::iterable>(list))
      tensors.push_back(Add(described));
    return tensors;
  }

  // The results as Python tuples; `client` owns the new buffers.
  py::list Results(const ClientPtr& client, CollectiveResult result) const {
    py::list out;
    for (ResultTensor& tensor : result.tensors) {
      py::object buffer = py::none();
      const bool owned = tensor.owned.valid();
      if (owned) {
        buffer = py::cast(std::make_unique<Buffer>(client, std::move(tensor.owned)));
      } else if (tensor.borrowed != nullptr) {
        for (const auto& [memory, object] : owners_) {
          if (memory == tensor.borrowed) buffer = object;
        }
      }
      py::tuple shape(tensor.shape.size());
      for (size_t i = 0; i < tensor.shape.size(); ++i) shape[i] = tensor.shape[i];
      out.append(py::make_tuple(buffer, tensor.offset, DtypeName(tensor.dtype), shape,
                                tensor.device.value(), owned));
    }
    return out;
  }

 private:
  std::vector<std::pair<const DeviceBuffer*, py::object>> owners_;
};

std::optional<DeviceIndex> OptionalDevice(std::optional<int32_t> device) {
  if (!device) return std::nullopt;
  return DeviceIndex(*device);
}

// scatter's per-chunk streams: None, or one entry (a gpumux.Stream or None)
// per chunk.
std::vector<std::optional<Stream>> ChunkStreams(const py::object& streams) {
  std::vector<std::optional<Stream>> chosen;
  if (streams.is_none()) return chosen;
  for (py::handle stream : py::reinterpret_borrow<py::iterable>(streams)) {
    if (stream.is_none()) {
      chosen.emplace_back(std::nullopt);
    } else {
      chosen.emplace_back(stream.cast<const StreamHandle&>().stream);
    }
  }
  return chosen;
}

}  // namespace

void BindComm(py::module_& module) {
  module.def(
      "_find_buffer",
      [](uintptr_t address, uint64_t nbytes) -> py::object {
        Buffer* buffer = FindBuffer(address, nbytes);
        if (buffer == nullptr) return py::none();
        return py::cast(buffer, py::return_value_policy::reference);
      },
      py::arg("address"), py::arg("nbytes"),
      "The live Buffer whose memory (Buffer.ptr) holds the `nbytes` bytes at `address`, or None.");
  module.def(
      "_broadcast",
      [](const ClientPtr& client, py::handle tensor, const std::vector<int64_t>& devices) {
        CallTensors call;
        const TensorRef source = call.Add(tensor);
        return call.Results(client,
                            Unlocked([&] { return comm::Broadcast(*client, source, devices); }));
      },
      py::arg("client"), py::arg("tensor"), py::arg("devices"));
  module.def(
      "_broadcast_out",
      [](const ClientPtr& client, py::handle tensor, py::handle out) {
        CallTensors call;
        const TensorRef source = call.Add(tensor);
        const std::vector<TensorRef> outputs = call.AddAll(out);
        return call.Results(client,
                            Unlocked([&] { return comm::BroadcastOut(*client, source, outputs); }));
      },
      py::arg("client"), py::arg("tensor"), py::arg("out"));
  module.def(
      "_broadcast_coalesced",
      [](const ClientPtr& client, py::handle tensors, const std::vector<int64_t>& devices,
         uint64_t buffer_size) {
        CallTensors call;
        const std::vector<TensorRef> inputs = call.AddAll(tensors);
        return call.Results(client, Unlocked([&] {
                              return comm::BroadcastCoalesced(*client, inputs, devices,
                                                              buffer_size);
                            }));
      },
      py::arg("client"), py::arg("tensors"), py::arg("devices"), py::arg("buffer_size"));
  module.def(
      "_reduce_add",
      [](const ClientPtr& client, py::handle inputs, std::optional<int32_t> destination) {
        CallTensors call;
        const std::vector<TensorRef> tensors = call.AddAll(inputs);
        return call.Results(client, Unlocked([&] {
                              return comm::ReduceAdd(*client, tensors, OptionalDevice(destination));
                            }));
      },
      py::arg("client"), py::arg("inputs"), py::arg("destination"));
  module.def(
      "_reduce_add_coalesced",
      [](const ClientPtr& client, py::handle inputs, std::optional<int32_t> destination,
         uint64_t buffer_size) {
        CallTensors call;
        std::vector<std::vector<TensorRef>> lists;
        for (py::handle list : py::reinterpret_borrow<py::iterable>(inputs))
          lists.push_back(call.AddAll(list));
        return call.Results(client, Unlocked([&] {
                              return comm::ReduceAddCoalesced(
                                  *client, lists, OptionalDevice(destination), buffer_size);
                            }));
      },
      py::arg("client"), py::arg("inputs"), py::arg("destination"), py::arg("buffer_size"));
  module.def(
      "_scatter",
      [](const ClientPtr& client, py::handle tensor, const std::vector<int64_t>& devices,
         std::optional<std::vector<int64_t>> chunk_sizes, int64_t dim, py::object streams) {
        CallTensors call;
        const TensorRef source = call.Add(tensor);
        const std::vector<std::optional<Stream>> chosen = ChunkStreams(streams);
        return call.Results(client, Unlocked([&] {
                              return comm::Scatter(*client, source, devices, chunk_sizes, dim,
                                                   chosen);
                            }));
      },
      py::arg("client"), py::arg("tensor"), py::arg("devices"), py::arg("chunk_sizes"),
      py::arg("dim"), py::arg("streams"));
  module.def(
      "_scatter_out",
      [](const ClientPtr& client, py::handle tensor, py::handle out, int64_t dim,
         py::object streams) {
        CallTensors call;
        const TensorRef source = call.Add(tensor);
        const std::vector<TensorRef> outputs = call.AddAll(out);
        const std::vector<std::optional<Stream>> chosen = ChunkStreams(streams);
        return call.Results(client, Unlocked([&] {
                              return comm::ScatterOut(*client, source, outputs, dim, chosen);
                            }));
      },
      py::arg("client"), py::arg("tensor"), py::arg("out"), py::arg("dim"), py::arg("streams"));
  module.def(
      "_gather",
      [](const ClientPtr& client, py::handle tensors, int64_t dim,
         std::optional<int32_t> destination) {
        CallTensors call;
        const std::vector<TensorRef> inputs = call.AddAll(tensors);
        return call.Results(client, Unlocked([&] {
                              return comm::Gather(*client, inputs, dim,
                                                  OptionalDevice(destination));
                            }));
      },
      py::arg("client"), py::arg("tensors"), py::arg("dim"), py::arg("destination"));
  module.def(
      "_gather_to_host",
      [](const ClientPtr& client, py::handle tensors, py::handle dst, int64_t dim) {
        CallTensors call;
        const std::vector<TensorRef> inputs = call.AddAll(tensors);
        HostView view(dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE);
        return call.Results(client, Unlocked([&] {
                              return comm::GatherToHost(*client, inputs, view.data(), view.size(),
                                                        dim);
                            }));
      },
      py::arg("client"), py::arg("tensors"), py::arg("dst"), py::arg("dim"),
      "Gathers into `dst` (a writable object with the buffer protocol holding exactly the "
      "gathered bytes); the one result tells the shape and has no buffer.");
  module.def(
      "_gather_out",
      [](const ClientPtr& client, py::handle tensors, py::handle out, int64_t dim) {
        CallTensors call;
        const std::vector<TensorRef> inputs = call.AddAll(tensors);
        const TensorRef output = call.Add(out);
        return call.Results(
            client, Unlocked([&] { return comm::GatherOut(*client, inputs, output, dim); }));
      },
      py::arg("client"), py::arg("tensors"), py::arg("out"), py::arg("dim"));
}

}  // namespace gpumux::python
