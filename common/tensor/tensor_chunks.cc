#include "common/tensor/tensor_chunks.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpumux {

std::string FormatShape(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<int> WrapDim(int64_t dim, size_t ndim) {
  const int64_t rank = ndim == 0 ? 1 : static_cast<int64_t>(ndim);
  if (dim < -rank || dim >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dimension out of range (expected to be in range of [", -rank, ", ", rank - 1,
                     "], but got ", dim, ")"));
  }
  return static_cast<int>(dim < 0 ? dim + rank : dim);
}

std::vector<int64_t> ChunkSizes(int64_t size, int64_t chunks) {
  if (size == 0) return std::vector<int64_t>(static_cast<size_t>(chunks), 0);
  const int64_t split = (size + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += split)
    sizes.push_back(std::min(split, size - start));
  return sizes;
}

absl::Status CheckChunkSizes(absl::Span<const int64_t> chunk_sizes, int64_t size) {
  int64_t sum = 0;
  for (int64_t chunk : chunk_sizes) sum += chunk;
  if (sum != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "given chunk sizes don't sum up to the tensor's size (sum(chunk_sizes) == ", sum,
        ", but expected ", size, ")"));
  }
  for (int64_t chunk : chunk_sizes) {
    if (chunk <= 0) return absl::InvalidArgumentError("Chunk size must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> GatherShape(absl::Span<const Shape> inputs, int dim) {
  if (inputs.empty())
    return absl::InvalidArgumentError("Expected at least one tensor to gather from");
  Shape expected = inputs.front();
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& input = inputs[i];
    if (input.size() != expected.size()) {
      // PyTorch's words, its missing space included.
      return absl::InvalidArgumentError(absl::StrCat(
          "Expected all input tensors to have the same number of dimensions, but tensor at index ",
          i, "has ", input.size(), " dimensions, (expected ", expected.size(), ")"));
    }
    expected[static_cast<size_t>(dim)] = input[static_cast<size_t>(dim)];
    if (input != expected) {
      return absl::InvalidArgumentError(absl::StrCat("Input tensor at index ", i,
                                                     " has invalid shape ", FormatShape(input),
                                                     ", but expected ", FormatShape(expected)));
    }
    total += input[static_cast<size_t>(dim)];
  }
  expected[static_cast<size_t>(dim)] = total;
  return expected;
}

int64_t ElementCount(absl::Span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  return count;
}

Slab NarrowSlab(absl::Span<const int64_t> shape, size_t element_size, int dim, int64_t start,
                int64_t length) {
  if (shape.empty()) {  // a 0-d tensor: one element, all of it
    return Slab{0, static_cast<uint64_t>(length) * element_size, 1, element_size};
  }
  const auto d = static_cast<size_t>(dim);
  const uint64_t inner = static_cast<uint64_t>(ElementCount(shape.subspan(d + 1))) * element_size;
  Slab slab;
  slab.rows = static_cast<uint64_t>(ElementCount(shape.subspan(0, d)));
  slab.stride = static_cast<uint64_t>(shape[d]) * inner;
  slab.row_bytes = static_cast<uint64_t>(length) * inner;
  slab.offset = static_cast<uint64_t>(start) * inner;
  return slab;
}

}  // namespace gpumux
