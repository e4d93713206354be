// gpumux._C: the native module under the gpumux package. It only binds
// libgpumux; the torch.cuda-shaped API (default connection, current device,
// context managers) is the pure-Python package on top.

#include "absl/synchronization/mutex.h"
#include "pybind11/pybind11.h"
#include "python/src/errors.h"
#include "python/src/native.h"

PYBIND11_MODULE(_C, module) {
  module.doc() = "gpumux's native bindings of libgpumux; use the gpumux package.";
  // Debian's Abseil builds Mutex with deadlock detection on, a graph lookup
  // on every lock: about 10% of an allocate and drop from Python. gpumuxd
  // and the CLI turn it off in main(); this module is libgpumux's entry
  // into a Python process, where nothing else of Abseil's relies on it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  gpumux::python::RegisterErrors(module);
  gpumux::python::BindClient(module);
  gpumux::python::BindBuffer(module);
  gpumux::python::BindStreams(module);
  gpumux::python::BindObserver(module);
  gpumux::python::BindComm(module);
}
