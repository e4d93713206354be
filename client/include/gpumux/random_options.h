#pragma once

// Parameters and results of random::Generate (torch.cuda.random fills).

#include <cstdint>
#include <variant>

#include "gpumux/event.h"

namespace gpumux {

// The element type of generated values (torch.dtype).
enum class Dtype { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8 };

// Bytes of one element (tensor.element_size()).
constexpr uint64_t DtypeSize(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat64:
    case Dtype::kInt64:
      return 8;
    case Dtype::kFloat32:
    case Dtype::kInt32:
      return 4;
    case Dtype::kFloat16:
    case Dtype::kBFloat16:
      return 2;
    case Dtype::kUInt8:
      return 1;
  }
  return 1;
}

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
