#pragma once

// Parameters and results of Client::Generate (torch.cuda.random fills).

#include <cstdint>
#include <variant>

#include "client/event.h"

namespace gpumux {

// The element type of generated values (torch.dtype).
enum class Dtype { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8 };

// Uniform on [low, high): torch.rand / tensor.uniform_(low, high), and for
// integer dtypes torch.randint(low, high).
struct Uniform {
  double low = 0.0;
  double high = 1.0;
};
// tensor.normal_(mean, std); floating dtypes only.
struct Normal {
  double mean = 0.0;
  double std = 1.0;
};
// Raw Philox words (tensor.random_() bits): 32-bit words for 4-byte and
// smaller dtypes, two words per 8-byte element.
struct Bits {};

using Distribution = std::variant<Uniform, Normal, Bits>;

struct GenerateResult {
  // The generator state the values were drawn from, before the call.
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Empty unless CopyOptions::completion_event.
  Event completion;
};

}  // namespace gpumux
