#pragma once

// Unlocked(call): runs a libgpumux call without the GIL (it may wait on the
// daemon) and turns its status into the Python exception of errors.h.

#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "pybind11/pybind11.h"
#include "python/src/errors.h"

namespace gpumux::python {

template <typename Call>
auto Unlocked(Call&& call) {
  using Result = decltype(call());
  if constexpr (std::is_same_v<Result, absl::Status>) {
    absl::Status status;
    {
      pybind11::gil_scoped_release unlocked;
      status = call();
    }
    Check(status);
  } else {
    std::optional<Result> result;
    {
      pybind11::gil_scoped_release unlocked;
      result.emplace(call());
    }
    return Unwrap(*std::move(result));
  }
}

}  // namespace gpumux::python
