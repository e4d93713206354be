#pragma once

// A view of host memory held through the buffer protocol (numpy arrays,
// bytearray, memoryview): the memory stays put while the view lives.

#include <cstdint>

#include "pybind11/pybind11.h"

namespace gpumux::python {

class HostView {
 public:
  // `flags`: PyBUF_* (contiguity, writability); raises the object's error
  // when it cannot give such a view.
  HostView(pybind11::handle object, int flags) {
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) throw pybind11::error_already_set();
  }
  ~HostView() { PyBuffer_Release(&view_); }
  HostView(const HostView&) = delete;
  HostView& operator=(const HostView&) = delete;
  void* data() const { return view_.buf; }
  uint64_t size() const { return static_cast<uint64_t>(view_.len); }

 private:
  Py_buffer view_;
};

}  // namespace gpumux::python
