#pragma once

// The objects gpumux._C hands to Python. Each holds a reference to its
// Client, so a buffer, stream or event keeps its session open as long as
// Python holds it (libgpumux's own rule is that they must not outlive their
// Client); the Client's last reference ends the session.

#include <cstdint>
#include <memory>
#include <optional>

#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory_snapshot.h"
#include "pybind11/pybind11.h"

namespace gpumux::python {

using ClientPtr = std::shared_ptr<Client>;

// A Client shared with Python; its destruction (which ends the session with
// round trips to the daemon) runs without the GIL.
ClientPtr ShareClient(std::unique_ptr<Client> client);

// gpumux.Buffer: one allocation of device memory.
struct Buffer {
  ClientPtr client;
  DeviceBuffer memory;
  // data() is this process's host memory (the host backend over a Unix
  // socket): the buffer protocol and __array_interface__ apply.
  bool host_memory = false;
  // Views that hold the memory through the buffer protocol or a DLPack
  // capsule (numpy, memoryview, torch.from_dlpack): while any lives, free()
  // refuses, as bytearray refuses to resize under exports.
  int exports = 0;

  Buffer(ClientPtr owner, DeviceBuffer buffer);
  // Frees the memory (as `del` of a torch tensor does): at once, with the
  // GIL held, where the local cache takes the block back without waiting
  // (memory::TryFree); otherwise queued, without the GIL.
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // The valid DeviceBuffer, or ValueError "the buffer was freed".
  const DeviceBuffer& Live() const;
  // Frees the memory now (memory::Free) unless views export it: BufferError.
  void Free();
};

// The live Buffer whose memory, as this process maps it (Buffer.ptr), holds
// the `nbytes` bytes at `address`; null when none does (freed memory, memory
// not mapped here, or memory gpumux did not give). With the GIL held.
Buffer* FindBuffer(uintptr_t address, uint64_t nbytes);

// gpumux.Stream's native part: a handle to one of the session's streams,
// destroyed with the last Python reference when this object created it.
struct StreamHandle {
  ClientPtr client;
  Stream stream;
  bool owned = false;

  StreamHandle(ClientPtr owner, Stream handle, bool owns);
  ~StreamHandle();
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
};

// gpumux.Event's native part.
struct EventHandle {
  ClientPtr client;
  Event event;

  EventHandle(ClientPtr owner, Event handle);
  ~EventHandle();
  EventHandle(const EventHandle&) = delete;
  EventHandle& operator=(const EventHandle&) = delete;
};

// Each binds its part of gpumux._C (buffer.cc, streams.cc, client.cc,
// observer.cc, comm.cc).
void BindBuffer(pybind11::module_& module);
void BindStreams(pybind11::module_& module);
void BindClient(pybind11::module_& module);
void BindObserver(pybind11::module_& module);
void BindComm(pybind11::module_& module);

// The dicts torch.cuda.memory_snapshot() returns, plus gpumux's fields.
pybind11::list SnapshotToPython(const std::vector<SegmentInfo>& segments);

}  // namespace gpumux::python
