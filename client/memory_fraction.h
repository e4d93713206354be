#pragma once

// torch.cuda.set_per_process_memory_fraction's argument check, message and
// all: PyTorch formats the value with Python's float repr, so this file also
// carries that formatting.

#include <string>

#include "absl/status/status.h"

namespace gpumux {

// OK for a fraction in [0, 1]; otherwise (NaN included) INVALID_ARGUMENT
// "Invalid fraction value: <fraction>. Allowed range: 0~1".
absl::Status ValidateMemoryFraction(double fraction);

// Python's repr(float): the shortest digits that round-trip, fixed notation
// for decimal exponents in [-4, 16) with at least one fractional digit
// ("2.0", "0.0001"), scientific otherwise ("1e+16", "1.5e-05"); "nan", "inf".
std::string PythonFloatRepr(double value);

}  // namespace gpumux
