#pragma once

// Element types by name, as the binding takes and gives them: torch's and
// numpy's names ("float32", "float", "half", ...) for gpumux's Dtype. Sizes
// are gpumux/random_options.h's DtypeSize.

#include <string>

#include "gpumux/random_options.h"

namespace gpumux::python {

// The Dtype named `name` (numpy's name or torch's without "torch."), or
// ValueError naming the ones there are.
Dtype DtypeOf(const std::string& name);

// numpy's and torch's common name of `dtype` ("float32", "bfloat16").
const char* DtypeName(Dtype dtype);

}  // namespace gpumux::python
