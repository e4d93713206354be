// gpumux._C: the native module under the gpumux package. It only binds
// libgpumux; the torch.cuda-shaped API (default connection, current device,
// context managers) is the pure-Python package on top.

#include "pybind11/pybind11.h"
#include "python/src/errors.h"
#include "python/src/native.h"

PYBIND11_MODULE(_C, module) {
  module.doc() = "gpumux's native bindings of libgpumux; use the gpumux package.";
  gpumux::python::RegisterErrors(module);
  gpumux::python::BindClient(module);
  gpumux::python::BindBuffer(module);
  gpumux::python::BindStreams(module);
  gpumux::python::BindObserver(module);
}
