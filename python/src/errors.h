#pragma once

// gpumux's status codes as Python exceptions: the one table (errors.cc) that
// maps each absl::StatusCode to a class of gpumux._C, every class a subclass
// of gpumux.GpumuxError (itself a RuntimeError) and, where Python has one, of
// the built-in exception a Python user catches for that kind of failure
// (ValueError, LookupError, ConnectionError, ...). Each exception carries
// `code` (the status code's name, "NOT_FOUND") and the daemon's message.

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pybind11/pybind11.h"

namespace gpumux::python {

// Creates the exception classes in `module`. Called once, from the module's
// initialisation.
void RegisterErrors(pybind11::module_& module);

// The exception object for a non-OK `status` (not raised).
pybind11::object ErrorFor(const absl::Status& status);

// Sets the Python error for a non-OK `status` and throws
// pybind11::error_already_set. RESOURCE_EXHAUSTED raises OutOfMemoryError
// when the message is PyTorch's out-of-memory text, ResourceExhaustedError
// otherwise.
[[noreturn]] void RaiseStatus(const absl::Status& status);

inline void Check(const absl::Status& status) {
  if (!status.ok()) RaiseStatus(status);
}

template <typename T>
T Unwrap(absl::StatusOr<T> value) {
  if (!value.ok()) RaiseStatus(value.status());
  return *std::move(value);
}

}  // namespace gpumux::python
