#include "python/src/errors.h"

#include <Python.h>

#include <string>

#include "absl/strings/match.h"

namespace py = pybind11;

namespace gpumux::python {
namespace {

// The table: a class per status code, its name in gpumux and the built-in
// exceptions it also derives from (besides GpumuxError).
struct ErrorClass {
  absl::StatusCode code;
  const char* name;
  PyObject* const* builtins[2];
  const char* doc;
};

PyObject* g_base = nullptr;           // gpumux.GpumuxError
PyObject* g_out_of_memory = nullptr;  // gpumux.OutOfMemoryError
PyObject* g_by_code[17] = {};         // indexed by absl::StatusCode

const ErrorClass kErrorClasses[] = {
    {absl::StatusCode::kInvalidArgument,
     "InvalidArgumentError",
     {&PyExc_ValueError, nullptr},
     "A bad argument (INVALID_ARGUMENT): a size, device, handle or token the daemon refused."},
    {absl::StatusCode::kOutOfRange,
     "OutOfRangeError",
     {&PyExc_ValueError, &PyExc_IndexError},
     "An offset or size past the end of a buffer (OUT_OF_RANGE)."},
    {absl::StatusCode::kNotFound,
     "NotFoundError",
     {&PyExc_LookupError, nullptr},
     "An unknown or foreign id (NOT_FOUND): a stream, event, allocation or token that does not "
     "exist or belongs to another session."},
    {absl::StatusCode::kAlreadyExists, "AlreadyExistsError", {nullptr, nullptr}, "ALREADY_EXISTS."},
    {absl::StatusCode::kFailedPrecondition,
     "FailedPreconditionError",
     {nullptr, nullptr},
     "The state forbids the call (FAILED_PRECONDITION): sharing a buffer not allocated "
     "shareable, a token already used, an event that is not interprocess."},
    {absl::StatusCode::kResourceExhausted,
     "ResourceExhaustedError",
     {nullptr, nullptr},
     "A limit was reached (RESOURCE_EXHAUSTED): streams or events per session."},
    {absl::StatusCode::kUnavailable,
     "UnavailableError",
     {&PyExc_ConnectionError, nullptr},
     "gpumuxd cannot be reached, went away, or ended the session (UNAVAILABLE)."},
    {absl::StatusCode::kDeadlineExceeded,
     "DeadlineExceededError",
     {&PyExc_TimeoutError, nullptr},
     "The daemon did not answer in time (DEADLINE_EXCEEDED)."},
    {absl::StatusCode::kPermissionDenied,
     "PermissionDeniedError",
     {&PyExc_PermissionError, nullptr},
     "The caller may not do this (PERMISSION_DENIED)."},
    {absl::StatusCode::kUnauthenticated,
     "UnauthenticatedError",
     {&PyExc_PermissionError, nullptr},
     "A missing or wrong bearer token (UNAUTHENTICATED)."},
    {absl::StatusCode::kCancelled, "CancelledError", {nullptr, nullptr}, "CANCELLED."},
    {absl::StatusCode::kAborted, "AbortedError", {nullptr, nullptr}, "ABORTED."},
    {absl::StatusCode::kUnimplemented,
     "UnimplementedError",
     {&PyExc_NotImplementedError, nullptr},
     "The daemon does not serve this call (UNIMPLEMENTED)."},
    {absl::StatusCode::kInternal,
     "InternalError",
     {nullptr, nullptr},
     "A broken invariant in the daemon (INTERNAL)."},
    {absl::StatusCode::kDataLoss, "DataLossError", {nullptr, nullptr}, "DATA_LOSS."},
    {absl::StatusCode::kUnknown, "UnknownError", {nullptr, nullptr}, "UNKNOWN."},
};

PyObject* NewClass(py::module_& module, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("gpumux.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  module.add_object(name, py::handle(cls));  // the module keeps a reference
  return cls;
}

}  // namespace

void RegisterErrors(py::module_& module) {
  g_base = NewClass(module, "GpumuxError", PyExc_RuntimeError,
                    "Base of every gpumux error. `code` is the status code's name "
                    "(\"NOT_FOUND\"); str() is the daemon's message.");
  for (const ErrorClass& entry : kErrorClasses) {
    py::tuple bases(1 + (entry.builtins[0] != nullptr) + (entry.builtins[1] != nullptr));
    size_t i = 0;
    bases[i++] = py::handle(g_base);
    for (PyObject* const* builtin : entry.builtins) {
      if (builtin != nullptr) bases[i++] = py::handle(*builtin);
    }
    g_by_code[static_cast<int>(entry.code)] = NewClass(module, entry.name, bases.ptr(), entry.doc);
  }
  PyObject* exhausted = g_by_code[static_cast<int>(absl::StatusCode::kResourceExhausted)];
  g_out_of_memory = NewClass(module, "OutOfMemoryError", exhausted,
                             "Out of device memory, or over the session's or tenant's limit "
                             "(RESOURCE_EXHAUSTED), with PyTorch's message. A RuntimeError, as "
                             "torch.cuda.OutOfMemoryError is.");
  module.def(
      "_error_for_code",
      [](int code, const std::string& message) {
        if (code <= 0 || code >= 17) code = static_cast<int>(absl::StatusCode::kUnknown);
        return ErrorFor(absl::Status(static_cast<absl::StatusCode>(code), message));
      },
      "The gpumux exception for an Abseil status code and message (the C ABI's last error).");
}

py::object ErrorFor(const absl::Status& status) {
  int code = static_cast<int>(status.code());
  PyObject* cls = (code > 0 && code < 17 && g_by_code[code] != nullptr) ? g_by_code[code] : g_base;
  if (status.code() == absl::StatusCode::kResourceExhausted &&
      absl::StrContains(status.message(), "out of memory")) {
    cls = g_out_of_memory;
  }
  std::string message(status.message());
  // The message may not be valid UTF-8 (it is the daemon's text): replace.
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
  if (!text) throw py::error_already_set();
  py::object error = py::handle(cls)(text);
  error.attr("code") = py::str(absl::StatusCodeToString(status.code()));
  return error;
}

void RaiseStatus(const absl::Status& status) {
  py::object error = ErrorFor(status);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

}  // namespace gpumux::python
